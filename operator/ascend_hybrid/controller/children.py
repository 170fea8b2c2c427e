"""The job's Services, ConfigMaps and NetworkPolicy: applied by the shell, and repaired when someone else deletes or
rewrites them (the kopf handlers report each change of a labelled child here).

- the rank table rewritten by someone else: what the ConfigMap now holds becomes the observed table, so the next
  decide() writes the right one back;
- a child deleted: the job's children count as not applied, so the next pass applies them again;
- `<job>-sched` deleted: its ClusterIP is baked into the running pods' MS_SCHED_HOST, so it is created again with
  that same IP (free again once the Service is gone) before the usual apply — the gang keeps running.
"""

from __future__ import annotations

import logging

from .. import names, render
from ..podview import attempt_of, container_env
from .kube import rank_table_of, service_ip
from .refused import Refused

log = logging.getLogger(__name__)
SCHED_HOST_ENV = "MS_SCHED_HOST"


def ensure_children(controller, key, job: dict, observed) -> None:
    namespace, name = key
    uid = job["metadata"]["uid"]
    record = controller.record_of(key)
    services = render.services(name, namespace, uid)
    keep_ip = record.sched_ip or _pods_sched_ip(observed)
    if keep_ip and observed.pods:
        _recreate_with_ip(controller, services[0], keep_ip)
    manifests = list(services)
    if observed.effective is not None:
        manifests.append(render.job_config_map(observed.effective, namespace, uid))
    if record.rank_table is None:
        manifests.append(render.rank_table_config_map(name, namespace, uid))
    if controller.settings.network_policy:
        manifests.append(render.network_policy(name, namespace, uid, list(controller.settings.metrics_peers)))
    live: dict[str, dict] = {}
    controller.each(lambda manifest: live.__setitem__(manifest["metadata"]["name"], controller.kube.apply(manifest)),
                    manifests)
    if record.rank_table is None:
        record.rank_table = {"status": "initializing"}
    record.sched_ip = service_ip(live[names.sched_service(name)])
    record.children_generation = job["metadata"].get("generation")


def _pods_sched_ip(observed) -> str | None:
    attempt = int((observed.job.get("status") or {}).get("attempt") or 0)
    for pod in observed.pods:
        if attempt_of(pod) == attempt and (ip := container_env(pod, SCHED_HOST_ENV)):
            return ip
    return None


def _recreate_with_ip(controller, service: dict, ip: str) -> None:
    """Creates `<job>-sched` with the IP the pods know (409 if it exists: nothing to do). If the IP went to another
    Service meanwhile the create is refused; the apply then makes one with a new IP (the gang then fails, restarts)."""
    wanted = {**service, "spec": {**service["spec"], "clusterIP": ip, "clusterIPs": [ip]}}
    try:
        controller.kube.create_service(wanted)
    except Refused as refused:
        log.warning("%s: could not keep ClusterIP %s: %s", service["metadata"]["name"], ip, refused)


def child_changed(controller, key, kind: str, name: str, event_type: str, body: dict) -> None:
    record = controller.jobs.get(key)
    if record is None:
        return  # not reconciled by this process yet: its first pass reads and applies everything anyway
    job = key[1]
    if event_type == "DELETED":
        record.children_generation = None
        if kind == "ConfigMap" and name == names.rank_table_config_map(job):
            record.rank_table = None
        controller.enqueue(key, 0.0)
        return
    if kind == "ConfigMap" and name == names.rank_table_config_map(job):
        table = rank_table_of(body)
        if table != record.rank_table:
            record.rank_table = table
            controller.enqueue(key, 0.0)
