"""What a reconcile pass asks the shell to do: one small frozen type per kind of action (pure data).

`decision.decide` returns them in order; `controller/loop.py` dispatches on the type. Nothing here talks to
the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_hybrid.gang.placement import GangRequest
from ascend_hybrid.spec.resolved import ResolvedJob


@dataclass(frozen=True)
class EnsureChildren:
    """Apply the Services and ConfigMaps of the job (server-side apply; idempotent); job.json from `job`, the
    resolved job the pods run (an auto job's chosen strategy in it)."""

    job: ResolvedJob


@dataclass(frozen=True)
class Place:
    """Place the gang of the current attempt on the cluster's inventory (the shell holds the one inventory)."""

    request: GangRequest
    job: ResolvedJob
    # spec.elastic: smaller gangs (largest first) the shell places when the whole one does not fit
    alternatives: tuple[tuple[GangRequest, ResolvedJob], ...] = ()
    # seconds until alternatives may be offered (the requeue must not wait longer)
    retry_within: float | None = None


@dataclass(frozen=True)
class ProbeGrow:
    """spec.elastic, shrunk: whether the spec's gang (`data` DP ways) fits the free chips, this job's own counted
    free; the core records the answer (elastic_steps.probed). Nothing is placed or promised."""

    request: GangRequest
    data: int
    keep: bool = False  # the request is the pods a growth adds beside the running ones (their chips stay held)


@dataclass(frozen=True)
class PodToCreate:
    manifest: dict
    node: str | None  # the node the placement chose (also in the manifest's required node affinity); None for a
                      # queued job's pods, created before Kueue admits them and placed after (queue_steps.py)
    chips: int   # NPUs it takes there, promised until the watch shows the pod


@dataclass(frozen=True)
class CreatePods:
    pods: tuple[PodToCreate, ...]


@dataclass(frozen=True)
class RemoveGates:
    pods: tuple[tuple[str, tuple[str, ...]], ...]  # (pod name, its gates as observed)


@dataclass(frozen=True)
class PinAndRelease:
    """Pods of a queued gang Kueue admitted: pin each to its placed node and remove the gang gate, one JSON patch
    per pod (kueue.release_patch)."""

    pods: tuple[tuple[str, tuple[dict, ...]], ...]  # (pod name, the patch's operations)


@dataclass(frozen=True)
class AdoptPods:
    """Pods an elastic shrink kept: their attempt and index labels and rank-index annotation set to the attempt and
    index they run as now, one JSON patch per pod (elastic_steps.adopt)."""

    pods: tuple[tuple[str, tuple[dict, ...]], ...]  # (pod name, the patch's operations)


@dataclass(frozen=True)
class DeleteWorkloads:
    """Delete the Kueue Workloads of attempts being torn down (Kueue then releases their quota and finalizers)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class ApplyPodGroup:
    """Volcano: the attempt's PodGroup (render.pod_group) by server-side apply, before the pods it holds are made."""

    manifest: dict


@dataclass(frozen=True)
class DeletePodGroups:
    """Volcano: the PodGroups of attempts that ended (Volcano would keep a Queue's room for one left Inqueue)."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class DeletePods:
    """Delete these pods. With `attempt`, they are every live pod of that attempt of the job: one delete of the
    collection the job and attempt labels select (a whole-gang restart of 128 pods is one call, not 128)."""

    names: tuple[str, ...]
    force: bool = False  # grace period 0: a pod on a lost node whose kubelet will never confirm its end
    attempt: int | None = None
    # with `attempt`: the pods' indexes (their index label), so the shell can split the collection into a few
    # concurrent calls (the apiserver deletes a collection one pod at a time); () when one has no index label
    indexes: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlaceReplacement:
    """ReplacePod: place the one pod `index` of the running gang again (a one-pod request on the shell's
    inventory: chip type, whole TP groups or a free HCCS ring, selectors, taints, health, avoided nodes)."""

    index: int
    request: GangRequest


@dataclass(frozen=True)
class WriteRankTable:
    """The table into `rings-config-<job>`, after the headless `<job>`'s EndpointSlices listing the table's pods
    (none for a job without Services): a table the apiserver has is one whose DNS records were written."""

    table: dict
    revision: int  # the ConfigMap's `version` counter for this table: one more than the one it replaces
    dns_slices: tuple[dict, ...] = ()


@dataclass(frozen=True)
class GrantLaunchers:
    """Let the job's launchers, and only them, read and write its LauncherChannel `<job>-recovery`: the channel,
    the job's own ServiceAccount (when the pods run as it), Role `<job>-launcher` on that one channel and its
    RoleBinding to `service_account`, each created where missing (render.launcher_grant). Made with the children,
    before the pods (which cannot be created without their ServiceAccount); checked again, at most once a minute,
    when the rank table completes and with every SignalLaunchers."""

    service_account: str


@dataclass(frozen=True)
class SignalLaunchers:
    """Write the rank generation every launcher must run into the job's LauncherChannel `<job>-recovery`
    (server-side apply of that one key), and check the launchers' grant as GrantLaunchers does. A launcher whose
    ranks run an older generation stops them and starts them again (recovery.py). Generation 0 without a world is
    what a channel without the key means: no write for it."""

    generation: int
    service_account: str
    world: str | None = None  # spec.elastic, pods kept at a shrink: their ranks and world, JSON (elastic_steps)
    checkpoint: str | None = None  # everySteps: auto: the interval in force, JSON (checkpoint_steps)


@dataclass(frozen=True)
class DeleteJob:
    """The TTL after the job finished has run out."""


@dataclass(frozen=True)
class PostEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


Action = (EnsureChildren | Place | PlaceReplacement | CreatePods | RemoveGates | PinAndRelease | AdoptPods
          | DeleteWorkloads | ApplyPodGroup | DeletePodGroups | DeletePods | WriteRankTable
          | GrantLaunchers | SignalLaunchers | DeleteJob | PostEvent | ProbeGrow)
