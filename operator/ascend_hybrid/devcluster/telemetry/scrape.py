"""Pure side of the dev cluster's Prometheus: its configuration and the file_sd target lists the telemetry
helper keeps up to date (Prometheus re-reads them on change, so targets follow pods without a reload).

Trainer targets carry the pod's identity as `__meta_ahj_*` labels and the config relabels them to `namespace`,
`pod` and `node`, as a kubernetes_sd_configs job relabels `__meta_kubernetes_*` in a real cluster: the operator's
PromQL (progress.prometheus_queries) selects trainer series by `namespace` and `pod`. The npu-exporter's series
name their pod themselves (`namespace`, `pod_name`), so its one target gets no pod labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import yaml

from ascend_hybrid.devcluster.telemetry.figures import SimPod

TRAINER_JOB = "ascend-trainer"
EXPORTER_JOB = "npu-exporter"
TRAINER_TARGETS_FILE = "trainers.json"
EXPORTER_TARGETS_FILE = "npu-exporter.json"
META_PREFIX = "__meta_ahj_"
RELABELED = ("namespace", "pod", "node")  # target label ← __meta_ahj_<same name>
SCRAPE_INTERVAL_SECONDS = 2
FILE_SD_REFRESH_SECONDS = 5  # a fallback: Prometheus also watches the files (inotify)


def trainer_targets(pods: Iterable[SimPod]) -> list[dict]:
    """One file_sd group per pod with NPUs: simulated ones and those running the real trainer alike, since both
    serve :9400 on the pod's IP."""
    groups = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        labels = {f"{META_PREFIX}namespace": pod.namespace, f"{META_PREFIX}pod": pod.name,
                  f"{META_PREFIX}node": pod.node}
        groups.append({"targets": [pod.trainer_address], "labels": labels})
    return groups


def exporter_targets(address: str | None) -> list[dict]:
    return [{"targets": [address], "labels": {}}] if address else []


def targets_text(groups: list[dict]) -> str:
    """Stable text (sorted keys), so an unchanged list is never rewritten."""
    return json.dumps(groups, indent=1, sort_keys=True) + "\n"


def prometheus_config(targets_dir: str, interval_seconds: int = SCRAPE_INTERVAL_SECONDS) -> dict:
    interval = f"{interval_seconds}s"
    refresh = f"{FILE_SD_REFRESH_SECONDS}s"
    relabel = [{"source_labels": [f"{META_PREFIX}{name}"], "target_label": name} for name in RELABELED]
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": TRAINER_JOB,
             "file_sd_configs": [{"files": [f"{targets_dir}/{TRAINER_TARGETS_FILE}"], "refresh_interval": refresh}],
             "relabel_configs": relabel},
            {"job_name": EXPORTER_JOB,
             "file_sd_configs": [{"files": [f"{targets_dir}/{EXPORTER_TARGETS_FILE}"], "refresh_interval": refresh}],
             # The exporter's own namespace/pod_name labels name the pod using each chip: keep them as they are.
             "honor_labels": True},
        ],
    }


def prometheus_config_text(targets_dir: str, interval_seconds: int = SCRAPE_INTERVAL_SECONDS) -> str:
    return "# Written by `ascend-hybrid dev-cluster up --prometheus`; rewritten on every up.\n" + yaml.safe_dump(
        prometheus_config(targets_dir, interval_seconds), sort_keys=False)
