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

from ascend_hybrid.contracts import names
from ascend_hybrid.contracts.chips import CHIPS
from ascend_hybrid.contracts.conditions import parse_time
from ascend_hybrid.controller import metrics
from ascend_hybrid.controller.kube import service_ip
from ascend_hybrid.controller.records import JobKey, JobRecord
from ascend_hybrid.controller.refused import Refused
from ascend_hybrid.controller.roles import ChildrenWriter
from ascend_hybrid.diagnosis import recovery
from ascend_hybrid.gang import ranktable, render
from ascend_hybrid.reconcile import membership, status_edge
from ascend_hybrid.reconcile.actions import PostEvent
from ascend_hybrid.spec import api
from ascend_hybrid.spec.resolved import ResolvedJob

log = logging.getLogger(__name__)
KEEP_IP_SECONDS = 10.0  # how long a deleted Service's IP may take to be released before another is taken


def ensure_children(controller: ChildrenWriter, key: JobKey, job: dict, resolved: ResolvedJob) -> None:
    """Applies the job's Services and its ConfigMap (job.json from `resolved`, the resolved job the pods run)."""
    namespace, name = key
    uid = job["metadata"]["uid"]
    record = controller.record_of(key)
    with record.children_lock:
        epoch = record.children_epoch  # a deletion seen while this runs means: apply again next pass
        lost_sched_ip, record.lost_sched_ip = record.lost_sched_ip, None
        table, revision = record.rank_table, record.rank_table_revision
    services = render.services(name, namespace, uid) if render.needs_services(resolved) else []
    if lost_sched_ip and services:
        try:
            _recreate_with_ip(controller, services[0], lost_sched_ip)
        except Exception:
            with record.children_lock:  # kept for the next pass, unless a newer loss came meanwhile
                record.lost_sched_ip = record.lost_sched_ip or lost_sched_ip
            raise
    manifests = list(services)
    job_json = render.job_config_text(resolved)
    # The rank table rides along (the ConfigMap holds both): the one last written, or the initializing one. A
    # ConfigMap deleted under a job is made again with the next count: `version` never goes back for its readers.
    if table is None:
        table = ranktable.initializing(ranktable.format_of(CHIPS[resolved.chip].super_pods))
        revision = revision + 1 if revision else 0
    manifests.append(render.rank_table_config_map(name, namespace, uid, job_json, table, revision))
    if controller.settings.network_policy:
        manifests.append(render.network_policy(name, namespace, uid, list(controller.settings.metrics_peers)))
    live: dict[str, dict] = {}
    # the launchers' grant is created beside the applies: the pods cannot be made before their ServiceAccount
    grant = launcher_grant(controller, key, uid, render.service_account(resolved))
    controller.each(lambda item: item[0](item[1]), [
        *((lambda manifest: live.__setitem__(manifest["metadata"]["name"], controller.kube.apply(manifest)), manifest)
          for manifest in manifests),
        *((lambda manifest: create_grant(controller, key, manifest, needed=True), manifest) for manifest in grant)])
    record.job_config = job_json
    record.sched_ip = service_ip(live[names.sched_service(name)]) if services else None
    if services and not record.old_slices_gone:
        _delete_old_slices(controller, key, job)
    with record.children_lock:  # checked and set at once: a deletion seen in between is not lost
        if record.children_epoch == epoch:
            record.rank_table, record.rank_table_revision = table, revision
            record.children_generation = job["metadata"].get("generation")
            record.children_data = resolved.data


def _delete_old_slices(controller: ChildrenWriter, key: JobKey, job: dict) -> None:
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


def write_dns_records(controller: ChildrenWriter, key: JobKey, slices: tuple[dict, ...]) -> None:
    """The headless `<job>`'s EndpointSlices, before its rank table. A refusal (an operator whose RBAC predates
    them) is logged and costs only the pods' DNS names: the table, which the gang needs, is still written."""
    try:
        controller.each(controller.kube.apply, slices)
    except Refused as refused:
        log.warning("%s/%s: the pods' DNS records were refused, their names do not resolve: %s", *key, refused)


def _recreate_with_ip(controller: ChildrenWriter, service: dict, ip: str) -> None:
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


def child_changed(controller: ChildrenWriter, key: JobKey, kind: str, name: str, event_type: str, body: dict) -> None:
    """Runs on a kopf handler thread, one per child at a time: the job's children fields under its children_lock."""
    record = controller.jobs.get(key)
    if record is None:
        return  # not reconciled by this process yet: its first pass reads and applies everything anyway
    with record.children_lock:
        _child_changed(controller, key, record, kind, name, event_type, body)


def _child_changed(controller: ChildrenWriter, key: JobKey, record: JobRecord, kind: str, name: str,
                   event_type: str, body: dict) -> None:
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
            if record.recovery_read:  # what changed since the data this process read (none before its first read)
                screen_reports(controller, key, record, data)
            record.recovery_data = data
            controller.enqueue(key, 0.0)
        return
    if kind == "ConfigMap" and name == names.rank_table_config_map(job):
        table, revision = read_rank_table(controller, key, body), ranktable.config_map_revision(body)
        if table != record.rank_table or revision != record.rank_table_revision:
            record.rank_table, record.rank_table_revision = table, revision
            controller.enqueue(key, 0.0)


MAX_REFUSAL_EVENTS = 3  # per change of a channel: a pod that writes junk in a loop fills no event stream


def screen_reports(controller: ChildrenWriter, key: JobKey, record: JobRecord, data: dict) -> None:
    """The reports that just changed on `<job>-recovery` and are ignored, counted in
    ascend_hybrid_rejected_inputs_total{kind="launcher-report"}: a malformed one (with a Warning event), and one of
    a pod that is not of the current attempt (an earlier attempt's pod, late; or a writer naming another pod)."""
    raw = (record.job or {}).get("status") or {"attempt": record.attempt}
    status = status_edge.parse({key: raw[key] for key in ("attempt", "recovery") if key in raw}).model
    ignored = recovery.screen_reports(record.recovery_data, data,
                                      membership.members(status, controller.indexes.job_pods(key)))
    for item in ignored:
        metrics.REJECTED_INPUTS.labels(kind="launcher-report", reason=item.reason).inc()
    refused = [item for item in ignored if item.reason != recovery.STALE]
    for item in refused[:MAX_REFUSAL_EVENTS]:
        record.events.append(PostEvent("Warning", "LauncherReportRefused",
                                       f"LauncherChannel {names.launcher_channel(key[1])}: {item.message}; ignored"))
    if len(ignored) > len(refused):
        log.info("%s/%s: %d reports of pods not of the current attempt ignored", *key, len(ignored) - len(refused))


def read_rank_table(controller: ChildrenWriter, key: JobKey, config_map: dict | None) -> dict | None:
    """The table `rings-config-<job>` holds (ranktable.read_config_map). A table refused (too large, expanding past
    its bound, not JSON) reads as {}, so the next pass writes the right one again; it is counted in
    ascend_hybrid_rejected_inputs_total{kind="rank-table"} and said in a Warning event on the job."""
    table, rejected = ranktable.read_config_map(config_map)
    if rejected is not None:
        metrics.REJECTED_INPUTS.labels(kind="rank-table", reason=rejected.reason).inc()
        log.warning("%s/%s: rank table refused: %s", *key, rejected)
        controller.record_of(key).events.append(PostEvent(
            "Warning", "RankTableUnreadable", f"ConfigMap {names.rank_table_config_map(key[1])}: {rejected}; "
                                              "the operator writes its table again"))
    return table


# How long a created grant is trusted before a job's pass creates it again (each create of one that exists is a
# 409): a ServiceAccount, Role or RoleBinding someone deleted while the job runs is back within this, checked when
# the rank table completes and with every restart's signal, not on every pass.
GRANT_RECHECK_SECONDS = 60.0


def launcher_grant(controller: ChildrenWriter, key: JobKey, uid: str, service_account: str) -> list[dict]:
    """What to create for the job's launchers (render.launcher_grant, with the empty channel): everything, the
    first time in a while (GRANT_RECHECK_SECONDS), else nothing. Where the operator grants a namespace's first job,
    the namespace-wide Role of older operators goes (delete_legacy_grant)."""
    namespace, name = key
    record = controller.record_of(key)
    if record.granted is not None and record.granted[0] == uid \
            and time.monotonic() - record.granted[1] < GRANT_RECHECK_SECONDS:
        return []
    record.granted = (uid, time.monotonic())
    if namespace not in controller.legacy_grants_gone:
        delete_legacy_grant(controller, namespace)
    return [render.new_launcher_channel(name, namespace, uid),
            *render.launcher_grant(name, namespace, uid, service_account)]


def delete_legacy_grant(controller: ChildrenWriter, namespace: str) -> None:
    """The namespace-wide launcher Role an older operator made (names.LEGACY_LAUNCHER_ROLE): it let any pod of the
    namespace running as a ServiceAccount it was bound to (`default` among them) write every job's channel. Pods of
    jobs started before the upgrade lose their channel with it (their next failure restarts the gang). Refused (an
    installation whose RBAC does not allow it): logged once."""
    controller.legacy_grants_gone.add(namespace)
    try:
        controller.kube.delete_legacy_launcher_role(namespace)
    except Refused as refused:
        log.warning("%s: the namespace-wide Role %s of an older operator could not be deleted; delete it by hand: "
                    "%s", namespace, names.LEGACY_LAUNCHER_ROLE, refused)


def grant_launchers(controller: ChildrenWriter, key: JobKey, job: dict, service_account: str) -> None:
    """The launchers' channel and grant (launcher_grant), created where missing (create_grant)."""
    controller.each(lambda manifest: create_grant(controller, key, manifest),
                    launcher_grant(controller, key, job["metadata"]["uid"], service_account))


def create_grant(controller: ChildrenWriter, key: JobKey, manifest: dict, needed: bool = False) -> None:
    """One part of the launchers' grant. A create the apiserver refuses (an operator not allowed to manage roles)
    is logged and only costs the in-place rungs (launchers that never report get RestartGang) — but for the job's
    own ServiceAccount before its pods (`needed`): without it they cannot be made, and the refusal is the job's
    (Authorized=False, naming the verb and resource)."""
    try:
        controller.kube.create(manifest)
    except Refused as refused:
        if needed and manifest["kind"] == "ServiceAccount":
            raise
        log.warning("%s/%s: %s %s of the launchers' grant was refused, ranks cannot restart in place: %s", *key,
                    manifest["kind"], manifest["metadata"]["name"], refused)


def signal_launchers(controller, key, job: dict, action) -> None:
    """The rank generation into LauncherChannel <job>-recovery (made by this apply when it went missing), and the
    launchers' grant (grant_launchers)."""
    namespace, name = key
    uid = job["metadata"]["uid"]
    record = controller.record_of(key)
    grant_launchers(controller, key, job, action.service_account)
    live = controller.kube.apply(render.launcher_channel(name, namespace, uid, action.generation, action.world,
                                                         action.checkpoint))
    with record.children_lock:
        record.recovery_data = dict(live.get("data") or {})


def recovery_data(controller, key, job: dict) -> dict | None:
    """The data of <job>-recovery: read once per process, then kept by the LauncherChannel watch (child_changed). It
    exists once the gang's rank table was written, a launcher reported or a restart was signalled: a job whose
    status names no table has none."""
    record = controller.record_of(key)
    if not record.recovery_read:
        if (job.get("status") or {}).get("rankTable"):
            live = controller.kube.read_launcher_channel(key[0], names.launcher_channel(key[1]))
            with record.children_lock:
                record.recovery_data = None if live is None else dict(live.get("data") or {})
        record.recovery_read = True
    return record.recovery_data
