"""Which pod runs as which index of the current attempt, and the world its launcher is told (pure).

Pods are made for one attempt and named by it (`<job>-a<attempt>-<index>`), their env describing that attempt's
world. An elastic shrink or growth (elastic_steps.py) keeps running pods into a new attempt instead of making them
again: status.recovery.kept lists them by the index each runs as now. Until their labels say so (AdoptPods patches
them) the core reads them as members of the attempt at that index (`kept_views`); their launchers, whose env still
says the old world, take the new one from the `world` key written beside the rank generation in `<job>-recovery`
(`signal`), which goes again once no kept pod runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ascend_hybrid.contracts import names, volcano
from ascend_hybrid.contracts.podview import attempt_of, is_deleting, labels_of, pod_index
from ascend_hybrid.gang import render
from ascend_hybrid.reconcile import checkpoint_steps
from ascend_hybrid.reconcile.actions import AdoptPods, SignalLaunchers
from ascend_hybrid.reconcile.state import Pass
from ascend_hybrid.spec.api import AscendHybridJobStatus


def kept_names(p: Pass) -> list[str]:
    """The kept pods of the current attempt by index ('' where a pod was made again since); [] when none."""
    state = p.s.recovery
    return kept_in(state.kept, state.kept_attempt, p.s.attempt) if state is not None else []


def kept_in(kept: list | None, kept_attempt: int | None, attempt: int | None) -> list[str]:
    """The kept pods (status.recovery.kept, of the attempt they joined) if they joined `attempt`, by index; []
    when none did."""
    if not kept or kept_attempt != attempt:
        return []
    return [str(name or "") for name in kept]


def members(status: AscendHybridJobStatus, pods: Iterable[dict]) -> dict[str, str]:
    """Pod name → UID of every live pod of the job's current attempt (made for it, or kept into it): the pods whose
    launchers' reports the operator reads."""
    attempt = status.attempt or 1
    state = status.recovery
    kept = set(kept_in(state.kept, state.kept_attempt, status.attempt) if state is not None else ()) - {""}
    return {pod["metadata"]["name"]: str(pod["metadata"].get("uid") or "") for pod in pods
            if not is_deleting(pod) and (attempt_of(pod) == attempt or pod["metadata"]["name"] in kept)}


def keep(p: Pass, pods: Iterable[dict]) -> None:
    """The pods (in their new index order) go on into the current attempt."""
    p.recovery().kept, p.recovery().kept_attempt = [pod["metadata"]["name"] for pod in pods], p.attempt


def kept_views(p: Pass, pods: Iterable[dict]) -> list[dict]:
    """The job's pods as the core reads them: a pod a shrink kept counts as the attempt and index it joined
    (status.recovery.kept) while its labels still say the old ones (AdoptPods relabels it)."""
    kept = {name: index for index, name in enumerate(kept_names(p)) if name}
    if not kept:
        return list(pods)
    attempt = p.attempt
    return [as_member(pod, attempt, kept[name]) if (name := pod["metadata"]["name"]) in kept else pod
            for pod in pods]


def as_member(pod: dict, attempt: int, index: int) -> dict:
    """The pod as a member of `attempt` at `index`; a pod Volcano schedules (its kubeflow replica-index label) joins
    that attempt's PodGroup too."""
    labels = {**labels_of(pod), names.ATTEMPT_LABEL: str(attempt), names.POD_INDEX_LABEL: str(index)}
    annotations = {**(pod["metadata"].get("annotations") or {}), names.RANK_INDEX_ANNOTATION: str(index)}
    if volcano.REPLICA_INDEX_LABEL in labels:
        labels[volcano.REPLICA_INDEX_LABEL] = str(index)
        annotations[volcano.GROUP_NAME_ANNOTATION] = names.pod_group(labels[names.JOB_LABEL], attempt)
    return {**pod, "metadata": {**pod["metadata"], "labels": labels, "annotations": annotations}}


def adopt(p: Pass, observed: Iterable[dict]) -> None:
    """Level-based: the kept pods' labels (attempt, index) and rank-index annotation patched to what they are now,
    so Services, the watch and a restarted operator find them by their labels."""
    attempt = p.s.attempt or 0
    by_name = {pod["metadata"]["name"]: pod for pod in observed}
    patches = []
    for index, name in enumerate(kept_names(p)):
        pod = by_name.get(name) if name else None
        if pod is None or is_deleting(pod):
            continue
        wanted = as_member(pod, attempt, index)
        if wanted["metadata"]["labels"] != labels_of(pod):  # the annotation goes in the same patch (and the pod
            patches.append((name, adoption_patch(wanted)))  # store does not keep it)
    if patches:
        p.d.act(AdoptPods(tuple(patches)))


def adoption_patch(wanted: dict) -> tuple[dict, ...]:
    """A JSON patch of the keys as_member sets (the rest of the labels and annotations untouched)."""
    def path(key: str) -> str:
        return key.replace("~", "~0").replace("/", "~1")
    labels, annotations = wanted["metadata"]["labels"], wanted["metadata"]["annotations"]
    label_keys = (names.ATTEMPT_LABEL, names.POD_INDEX_LABEL, volcano.REPLICA_INDEX_LABEL)
    annotation_keys = (names.RANK_INDEX_ANNOTATION, volcano.GROUP_NAME_ANNOTATION)
    return tuple({"op": "add", "path": f"/metadata/{where}/{path(key)}", "value": values[key]}
                 for where, values, keys in (("labels", labels, label_keys), ("annotations", annotations,
                                                                              annotation_keys))
                 for key in keys if key in values)


def member_name(p: Pass, index: int) -> str:
    """The name of the pod that runs as `index` in the current attempt: a kept pod's own, else the one the
    operator makes."""
    kept = kept_names(p)
    if index < len(kept) and kept[index]:
        return kept[index]
    return names.pod_name(p.meta["name"], p.attempt, index)


def replaced(p: Pass, index: int) -> None:
    """ReplacePod makes pod `index` again under the attempt's own name: a kept pod there is kept no more."""
    state = p.s.recovery
    if state is not None and state.kept and kept_names(p) and index < len(state.kept):
        state.kept = [name if i != index else "" for i, name in enumerate(state.kept)]


def launcher_world(p: Pass, pods: Iterable[dict]) -> str | None:
    """What the launchers of kept pods run now, written beside the rank generation (their env still describes the
    world they were made for): each pod's index, the world size, the degrees and job.json; None while no pod of
    the attempt was kept."""
    if not kept_names(p):
        return None
    attempt = p.attempt
    job = p.resolved
    members = {pod_index(pod): pod["metadata"]["name"] for pod in kept_views(p, pods)
               if attempt_of(pod) == attempt and not is_deleting(pod)}
    slots = {index: members.get(index) or member_name(p, index) for index in range(job.pod_count)}
    world = {"attempt": attempt, "worldSize": job.world_size, "parallel": job.degrees,
             "pods": {name: index for index, name in slots.items()}, "scheduler": slots[0],
             "jobConfig": render.job_config(job)}
    return json.dumps(world, sort_keys=True)


def service_account(p: Pass) -> str:
    return render.service_account(p.resolved)


def signal(p: Pass, generation: int) -> SignalLaunchers:
    """The generation for every launcher; with pods a shrink or growth kept, the world they run in now beside it
    (gone again once no kept pod runs)."""
    return SignalLaunchers(generation, service_account(p), launcher_world(p, p.o.pods), checkpoint_steps.channel_value(p))
