"""Where a named dev cluster keeps its files: ~/.cache/ascend-hybrid/clusters/<name>/ (or $AHJ_CLUSTERS_DIR/<name>)
holds kwok's workdir, the kubeconfig, cluster.json, and the helper processes' pid and ready files (helpers/) and
logs."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ascend_hybrid.devcluster.kube import processes

DEFAULT_NAME = "ahj"
CLUSTERS_ENV = "AHJ_CLUSTERS_DIR"
NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class ClusterPaths:
    name: str
    root: Path

    @property
    def kwok_workdir(self) -> Path:
        return self.root / "kwok"

    @property
    def kwok_cluster(self) -> Path:
        return self.kwok_workdir / "clusters" / self.name

    @property
    def kwok_config(self) -> Path:
        """What kwokctl keeps of the cluster (components, ports, stages); present once it was created."""
        return self.kwok_cluster / "kwok.yaml"

    @property
    def kwokctl_config(self) -> Path:
        """What we hand to kwokctl --config: the chosen ports and the stage set."""
        return self.root / "kwokctl-config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def settings(self) -> Path:
        return self.root / "cluster.json"

    @property
    def helpers_dir(self) -> Path:
        """Pid and ready files of the helper processes that belong to the cluster (device plugin, process runtime,
        telemetry, Prometheus, the demo's operator; see helpers.py): `down` stops each of them, by pid, before
        the control plane."""
        return self.root / "helpers"

    def helper_pid_files(self) -> list[Path]:
        return sorted(self.helpers_dir.glob("*.pid")) if self.helpers_dir.exists() else []

    @property
    def kwokctl_log(self) -> Path:
        return self.root / "kwokctl.log"

    def component_pids(self) -> dict[str, int]:
        found = {}
        for pid_file in sorted((self.kwok_cluster / "pids").glob("*.pid")):
            pid = processes.read_pid(pid_file)
            if pid:
                found[pid_file.stem] = pid
        return found

    def log_files(self) -> list[Path]:
        """kwok's component logs, kwokctl's, and every helper's (<name>.log in the cluster's directory)."""
        helper_logs = [self.root / f"{pid_file.stem}.log" for pid_file in self.helper_pid_files()]
        return sorted((self.kwok_cluster / "logs").glob("*.log")) + [self.kwokctl_log, *helper_logs]


@dataclass(frozen=True)
class Settings:
    """Fixed when the cluster is created; add-nodes continues with them."""

    chip: str
    racks: int
    nodes_per_rack: int
    # Pod addresses of this cluster: a slice of 127.16.0.0/16 no other cluster on the machine uses, so fixed
    # ports on pod IPs (trainer metrics :9400, MindSpore's scheduler) never collide between clusters.
    # None: a cluster made before slices existed, using all of 127.16.0.0/16; it reserves nothing.
    pod_cidr: str | None = None
    # MindCluster's device plugin mode (deviceplugin/allocation.MODES) and its -listWatchPeriod in seconds
    device_plugin: str = "kubelet"
    list_watch_period: float = 5.0


POD_NETWORK = "127.16.0.0/16"
POD_SLICE_PREFIX = 20  # 16 clusters side by side, 4 094 pod addresses each


def free_pod_cidr(others: list[str]) -> str:
    """The first /20 of 127.16.0.0/16 that overlaps none of the other clusters' pod ranges."""
    import ipaddress

    taken = [ipaddress.ip_network(cidr) for cidr in others]
    for candidate in ipaddress.ip_network(POD_NETWORK).subnets(new_prefix=POD_SLICE_PREFIX):
        if not any(candidate.overlaps(network) for network in taken):
            return str(candidate)
    raise RuntimeError(f"every slice of {POD_NETWORK} is in use by another dev cluster: bring one down first")


def other_pod_cidrs(name: str) -> list[str]:
    root = clusters_dir()
    if not root.exists():
        return []
    cidrs = []
    for directory in sorted(root.iterdir()):
        settings = load_settings(ClusterPaths(name=directory.name, root=directory)) if directory.name != name else None
        if settings is not None and settings.pod_cidr:
            cidrs.append(settings.pod_cidr)
    return cidrs


def clusters_dir() -> Path:
    override = os.environ.get(CLUSTERS_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-hybrid" / "clusters"


def cluster_paths(name: str = DEFAULT_NAME) -> ClusterPaths:
    if not NAME_PATTERN.match(name):
        raise ValueError(f"cluster name {name!r} must be 1-40 lowercase letters, digits or '-'")
    return ClusterPaths(name=name, root=clusters_dir() / name)


def load_settings(paths: ClusterPaths) -> Settings | None:
    try:
        return Settings(**json.loads(paths.settings.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def save_settings(paths: ClusterPaths, settings: Settings) -> None:
    paths.settings.write_text(json.dumps(asdict(settings)) + "\n")
