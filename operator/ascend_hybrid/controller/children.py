"""The job's Services, ConfigMaps and NetworkPolicy: applied by the shell, and repaired when someone else deletes or
rewrites them (the kopf handlers report each change of a labelled child here).

- the rank table rewritten by someone else: what the ConfigMap now holds becomes the observed table, so the next
  decide() writes the right one back;
- a child deleted: the job's children count as not applied, so the next pass applies them again;
- `<job>-sched` deleted: its ClusterIP is baked into the running pods' MS_SCHED_HOST, so it is created again with
  that same IP (free again a moment after the Service is gone) before the usual apply — the gang keeps running.
  (Deleted while no operator ran, or its IP taken meanwhile, it comes back with a new IP: decide() then restarts
  the gang, reason SchedServiceChanged, since the pods' MS_SCHED_HOST leads nowhere.)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.controller.kube import rank_table_of, service_ip
from ascend_hybrid.controller.refused import Refused
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.spec import api

if TYPE_CHECKING:  # the loop imports this module: a runtime import would be circular
    from ascend_hybrid.controller.loop import Controller
    from ascend_hybrid.controller.records import JobKey
    from ascend_hybrid.spec.resolved import ResolvedJob

log = logging.getLogger(__name__)
KEEP_IP_SECONDS = 10.0  # how long a deleted Service's IP may take to be released before another is taken


def ensure_children(controller: Controller, key: JobKey, job: dict, resolved: ResolvedJob) -> None:
    """Applies the job's Services and its ConfigMap (job.json from `resolved`, the resolved job the pods run)."""
    namespace, name = key
    uid = job["metadata"]["uid"]
    record = controller.record_of(key)
    epoch = record.children_epoch  # a deletion seen while this runs means: apply again next pass
    services = render.services(name, namespace, uid) if render.needs_services(resolved) else []
    if record.lost_sched_ip and services:
        _recreate_with_ip(controller, services[0], record.lost_sched_ip)
    record.lost_sched_ip = None
    manifests = list(services)
    job_json = render.job_config_text(resolved)
    # The rank table rides along (the ConfigMap holds both): the one last written, or the initializing one. A
    # ConfigMap deleted under a job is made again with the next count: `version` never goes back for its readers.
    table, revision = record.rank_table, record.rank_table_revision
    if table is None:
        table = ranktable.initializing(ranktable.format_of(CHIPS[resolved.chip].super_pods))
        revision = revision + 1 if revision else 0
    manifests.append(render.rank_table_config_map(name, namespace, uid, job_json, table, revision))
    if controller.settings.network_policy:
        manifests.append(render.network_policy(name, namespace, uid, list(controller.settings.metrics_peers)))
    live: dict[str, dict] = {}
    controller.each(lambda manifest: live.__setitem__(manifest["metadata"]["name"], controller.kube.apply(manifest)),
                    manifests)
    record.rank_table, record.rank_table_revision, record.job_config = table, revision, job_json
    record.sched_ip = service_ip(live[names.sched_service(name)]) if services else None
    if services and not record.old_slices_gone:
        _delete_old_slices(controller, key, job)
    if record.children_epoch == epoch:
        record.children_generation = job["metadata"].get("generation")
        record.children_data = resolved.data


def _delete_old_slices(controller: Controller, key: JobKey, job: dict) -> None:
    """Before design §6's records, `<job>` selected the job's pods and Kubernetes' EndpointSlice controller wrote
    its slices; the apply above removed that selector, but the controller leaves the slices it wrote (stale
    records beside the operator's). A job made before this process started may have them: they go, once per
    process. A job made since was only served by this operator's code: nothing to ask."""
    created = parse_time(job["metadata"].get("creationTimestamp"))
    if created is not None and created < controller.started_at:
        try:
            controller.kube.delete_controller_slices(key[0], names.headless_service(key[1]))
        except Refused as refused:
            log.warning("%s/%s: old EndpointSlices of the headless Service kept: %s", *key, refused)
    controller.record_of(key).old_slices_gone = True


def write_dns_records(controller: Controller, key: JobKey, slices: tuple[dict, ...]) -> None:
    """The headless `<job>`'s EndpointSlices, before its rank table. A refusal (an operator whose RBAC predates
    them) is logged and costs only the pods' DNS names: the table, which the gang needs, is still written."""
    try:
        controller.each(controller.kube.apply, slices)
    except Refused as refused:
        log.warning("%s/%s: the pods' DNS records were refused, their names do not resolve: %s", *key, refused)


def _recreate_with_ip(controller: Controller, service: dict, ip: str) -> None:
    """Creates `<job>-sched` with the IP the pods know; 409: it exists again, nothing to do. The apiserver releases
    a deleted Service's IP a moment later ("provided IP is already allocated" until then): tried for
    KEEP_IP_SECONDS, then the apply makes one with a new IP (the gang then fails and restarts)."""
    wanted = {**service, "spec": {**service["spec"], "clusterIP": ip, "clusterIPs": [ip]}}
    deadline = time.monotonic() + KEEP_IP_SECONDS
    while True:
        try:
            controller.kube.create_service(wanted)
            return
        except Refused as refused:
            if refused.status != 422 or time.monotonic() > deadline:
                log.warning("%s: could not keep ClusterIP %s: %s", service["metadata"]["name"], ip, refused)
                return
        time.sleep(0.5)


def child_changed(controller: Controller, key: JobKey, kind: str, name: str, event_type: str, body: dict) -> None:
    record = controller.jobs.get(key)
    if record is None:
        return  # not reconciled by this process yet: its first pass reads and applies everything anyway
    job = key[1]
    if event_type == "DELETED":
        record.children_generation = None
        record.children_epoch += 1
        controller.read_job_again(key)
        if kind == "ConfigMap" and name == names.rank_table_config_map(job):
            record.rank_table = None
        if kind == api.CHANNEL_KIND:
            record.recovery_data = None
        if kind == "Service" and name == names.sched_service(job):
            record.lost_sched_ip = service_ip(body) or record.sched_ip
        controller.enqueue(key, 0.0)
        return
    if kind == api.CHANNEL_KIND and name == names.launcher_channel(job):
        data = dict(body.get("data") or {})
        if data != record.recovery_data:  # a launcher reported: the job's next pass reads it
            record.recovery_data = data
            controller.enqueue(key, 0.0)
        return
    if kind == "ConfigMap" and name == names.rank_table_config_map(job):
        table, revision = rank_table_of(body), ranktable.config_map_revision(body)
        if table != record.rank_table or revision != record.rank_table_revision:
            record.rank_table, record.rank_table_revision = table, revision
            controller.enqueue(key, 0.0)


# How long an applied grant is trusted before a job's pass applies it again: a Role or RoleBinding deleted (or its
# namespace deleted and made again) while the operator runs is back within this, at two applies per namespace and
# ServiceAccount per period instead of two per job.
GRANT_RECHECK_SECONDS = 60.0


def signal_launchers(controller, key, job: dict, action) -> None:
    """The rank generation into LauncherChannel <job>-recovery (made by this apply when no launcher reported yet),
    and the launchers' grant (grant_launchers)."""
    namespace, name = key
    uid = job["metadata"]["uid"]
    record = controller.record_of(key)
    live = controller.kube.apply(render.launcher_channel(name, namespace, uid, action.generation, action.world,
                                                         action.checkpoint))
    record.recovery_data = dict(live.get("data") or {})
    grant_launchers(controller, namespace, action.service_account)


def grant_launchers(controller, namespace: str, service_account: str) -> None:
    """The namespace's launcher Role and the ServiceAccount's RoleBinding to it, unless applied less than
    GRANT_RECHECK_SECONDS ago. A grant the apiserver refuses (the operator not allowed to manage roles) is logged
    and only costs the in-place rungs: pods that never report get RestartGang."""
    grant = (namespace, service_account)
    if time.monotonic() - controller.launcher_grants.get(grant, -GRANT_RECHECK_SECONDS) < GRANT_RECHECK_SECONDS:
        return
    try:
        for manifest in render.launcher_grant(namespace, service_account):
            controller.kube.apply(manifest)
    except Refused as refused:
        log.warning("%s: the launchers' Role for ServiceAccount %s was refused, ranks cannot restart in place: %s",
                    namespace, service_account, refused)
    controller.launcher_grants[grant] = time.monotonic()  # a refusal too: not tried again every pass


def recovery_data(controller, key, job: dict) -> dict | None:
    """The data of <job>-recovery: read once per process, then kept by the LauncherChannel watch (child_changed). It
    exists once the gang's rank table was written, a launcher reported or a restart was signalled: a job whose
    status names no table has none."""
    record = controller.record_of(key)
    if not record.recovery_read:
        if (job.get("status") or {}).get("rankTable"):
            live = controller.kube.read_launcher_channel(key[0], names.launcher_channel(key[1]))
            record.recovery_data = None if live is None else dict(live.get("data") or {})
        record.recovery_read = True
    return record.recovery_data
