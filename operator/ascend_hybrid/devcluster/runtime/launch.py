"""Pure side of the process runtime's "kubelet": what one pod's container becomes as a local process.

From the pod, the ConfigMaps it names and the runtime's directory: the command line (Kubernetes' command/args
rules over the trainer image's entrypoint), the env (downward API and ConfigMap references resolved, `$(VAR)`
expanded), the files of its ConfigMap volumes, and the local directories its mounts map to. A container sees
paths such as /user/serverid/devindex/config/hccl.json; a local process cannot, so env values and arguments that
name a path under a mapped mount are rewritten to the local copy (the trainer reads RANK_TABLE_FILE,
AHJ_JOB_CONFIG, AHJ_CHECKPOINT_DIR and AHJ_TERMINATION_LOG from its env, so that is all it needs). The container's
terminationMessagePath is such a mount too: a file of the pod's directory, read back when the process ends.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

RUNTIME_ANNOTATION = "sim.hybrid.ascend.dev/runtime"
PROCESS_RUNTIME = "process"
CONTAINER_NAME = "ascend"
DEFAULT_GRACE_SECONDS = 30.0
DEFAULT_TERMINATION_PATH = "/dev/termination-log"  # Kubernetes' default terminationMessagePath


@dataclass(frozen=True)
class Image:
    """What the image would contribute: the trainer image's ENTRYPOINT, CMD and ENV (see the Dockerfile)."""

    entrypoint: tuple[str, ...] = ("ascend-hybrid-trainer",)
    cmd: tuple[str, ...] = ("launch",)
    env: tuple[tuple[str, str], ...] = (("PYTHONUNBUFFERED", "1"),)


TRAINER_IMAGE = Image()


class NotRunnable(ValueError):
    """The container cannot start (yet): `reason` is the kubelet's word for it (FailedMount while a ConfigMap
    is missing, CreateContainerConfigError for a spec the runtime cannot honour)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class PodLayout:
    """Where one pod's files live under the runtime's directory (named as the kubelet names /var/log/pods)."""

    root: Path
    namespace: str
    name: str
    uid: str

    @classmethod
    def of(cls, runtime_root: Path, pod: dict) -> PodLayout:
        meta = pod["metadata"]
        return cls(runtime_root, meta["namespace"], meta["name"], meta["uid"])

    @property
    def directory(self) -> Path:
        return self.root / "pods" / f"{self.namespace}_{self.name}_{self.uid}"

    @property
    def log_file(self) -> Path:
        return self.directory / "container.log"

    @property
    def work_dir(self) -> Path:
        return self.directory / "work"

    @property
    def home_dir(self) -> Path:
        return self.directory / "home"

    @property
    def termination_file(self) -> Path:
        """What the container sees at its terminationMessagePath (the kubelet mounts a file per container)."""
        return self.directory / "termination-log"

    def volume_dir(self, volume: str) -> Path:
        return self.directory / "volumes" / volume

    def claim_dir(self, claim: str) -> Path:
        return claim_directory(self.root, self.namespace, claim)


def claim_directory(runtime_root: Path, namespace: str, claim: str) -> Path:
    """Outlives the pod: a restarted attempt mounting the same claim finds its checkpoints there."""
    return runtime_root / "claims" / namespace / claim


@dataclass(frozen=True)
class LaunchSpec:
    container: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    files: dict[Path, bytes]           # ConfigMap volume files, local path → content
    directories: tuple[Path, ...]      # to exist before the start: work, home, emptyDirs, claims
    grace_seconds: float


def is_process_pod(pod: dict) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(RUNTIME_ANNOTATION) == PROCESS_RUNTIME


def grace_seconds(pod: dict) -> float:
    """The deletion's grace period while the pod is being deleted, else the spec's (Kubernetes default 30 s)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return DEFAULT_GRACE_SECONDS


def runtime_container(pod: dict) -> dict:
    """The container the runtime runs: `ascend` (the operator's), or the only one. One process per pod."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if container.get("name") == CONTAINER_NAME:
            return container
    if len(containers) == 1:
        return containers[0]
    raise NotRunnable("CreateContainerConfigError", f"the process runtime runs one container per pod: name it "
                      f"{CONTAINER_NAME!r} (the pod has {', '.join(c.get('name', '?') for c in containers)})")


def expand_references(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, undefined ones kept verbatim, `$$` is `$`."""
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "$" and i + 1 < len(text):
            following = text[i + 1]
            if following == "$":
                out.append("$")
                i += 2
                continue
            if following == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else text[i:end + 1])
                    i = end + 1
                    continue
        out.append(char)
        i += 1
    return "".join(out)


def _subscript(path: str, prefix: str) -> str | None:
    """metadata.labels['a/b'] → a/b (for prefix metadata.labels)."""
    if path.startswith(prefix + "[") and path.endswith("]"):
        return path[len(prefix) + 1:-1].strip("'\"")
    return None


def downward_value(pod: dict, field_path: str) -> str:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"), "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"), "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"), "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(entry["ip"] for entry in status.get("hostIPs") or []),
        "status.podIPs": ",".join(entry["ip"] for entry in status.get("podIPs") or []),
    }
    if field_path in simple:
        return simple[field_path] or ""
    for prefix, source in (("metadata.labels", meta.get("labels")), ("metadata.annotations", meta.get("annotations"))):
        key = _subscript(field_path, prefix)
        if key is not None:
            return (source or {}).get(key, "")
    raise NotRunnable("CreateContainerConfigError", f"downward API field {field_path!r} is not supported")


def _configmap_value(namespace: str, ref: dict, configmaps: dict, what: str) -> str | None:
    configmap = configmaps.get((namespace, ref.get("name")))
    data = (configmap or {}).get("data") or {}
    if ref.get("key") in data:
        return data[ref["key"]]
    if ref.get("optional"):
        return None
    missing = f"key {ref.get('key')!r} of " if configmap else ""
    raise NotRunnable("CreateContainerConfigError", f"{what}: {missing}configmap {ref.get('name')!r} not found")


def resolve_env(pod: dict, container: dict, configmaps: dict, base: dict[str, str]) -> dict[str, str]:
    """base (the image's env) + envFrom + env in order; each literal value expanded against what the container
    defined before it, as the kubelet does."""
    namespace = pod["metadata"]["namespace"]
    defined: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" not in source:
            raise NotRunnable("CreateContainerConfigError", "envFrom supports configMapRef only here")
        ref = source["configMapRef"]
        configmap = configmaps.get((namespace, ref.get("name")))
        if configmap is None and not ref.get("optional"):
            raise NotRunnable("CreateContainerConfigError", f"envFrom: configmap {ref.get('name')!r} not found")
        for key, value in ((configmap or {}).get("data") or {}).items():
            defined[f"{source.get('prefix', '')}{key}"] = value
    for entry in container.get("env") or []:
        name, source = entry["name"], entry.get("valueFrom")
        if source is None:
            defined[name] = expand_references(entry.get("value") or "", defined)
        elif "fieldRef" in source:
            defined[name] = downward_value(pod, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            value = _configmap_value(namespace, source["configMapKeyRef"], configmaps, f"env {name}")
            if value is not None:
                defined[name] = value
        else:
            kind = next(iter(source), "?")
            raise NotRunnable("CreateContainerConfigError", f"env {name}: valueFrom.{kind} is not supported by the "
                              f"process runtime (fieldRef and configMapKeyRef are)")
    return {**base, **defined}


def command_line(container: dict, env: dict[str, str], image: Image = TRAINER_IMAGE) -> tuple[str, ...]:
    """command replaces the image's ENTRYPOINT and drops its CMD; args replace CMD (Kubernetes' rules)."""
    command, args = container.get("command"), container.get("args")
    if command:
        words = list(command) + list(args or [])
    else:
        words = list(image.entrypoint) + (list(args) if args else list(image.cmd))
    return tuple(expand_references(word, env) for word in words)


def _volume_kinds(pod: dict) -> dict[str, dict]:
    return {volume["name"]: volume for volume in (pod.get("spec") or {}).get("volumes") or []}


def volume_roots(pod: dict, layout: PodLayout) -> dict[str, Path]:
    """The local directory of each volume the runtime can provide: ConfigMaps, downward API and projected volumes
    (the ServiceAccount token among them) and emptyDirs per pod, claims per (namespace, claim). Others (secrets,
    hostPath) are left unmapped."""
    roots = {}
    for name, volume in _volume_kinds(pod).items():
        if any(kind in volume for kind in ("configMap", "emptyDir", "downwardAPI", "projected")):
            roots[name] = layout.volume_dir(name)
        elif "persistentVolumeClaim" in volume:
            roots[name] = layout.claim_dir(volume["persistentVolumeClaim"]["claimName"])
    return roots


def mount_map(container: dict, roots: dict[str, Path]) -> list[tuple[str, Path]]:
    """(container path, local path) of every mapped mount, the longest container path first."""
    pairs = []
    for mount in container.get("volumeMounts") or []:
        root = roots.get(mount["name"])
        if root is not None:
            local = root / mount["subPath"] if mount.get("subPath") else root
            pairs.append((str(PurePosixPath(mount["mountPath"])), local))
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def map_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    for container_path, local in mounts:
        if value == container_path:
            return str(local)
        if value.startswith(container_path.rstrip("/") + "/"):
            return str(local / value[len(container_path.rstrip("/")) + 1:])
    return value


def configmap_files(pod: dict, configmaps: dict, layout: PodLayout) -> dict[Path, bytes]:
    """The files of every ConfigMap volume (all keys, or the listed items), as the kubelet projects them."""
    namespace, files = pod["metadata"]["namespace"], {}
    for name, volume in _volume_kinds(pod).items():
        if "configMap" in volume:
            files.update(configmap_source_files(namespace, name, volume["configMap"], configmaps,
                                                layout.volume_dir(name)))
    return files


def configmap_source_files(namespace: str, volume: str, source: dict, configmaps: dict,
                           directory: Path) -> dict[Path, bytes]:
    """One ConfigMap's files under `directory`: a ConfigMap volume, or a ConfigMap source of a projected one."""
    files: dict[Path, bytes]
    configmap, files = configmaps.get((namespace, source.get("name"))), {}
    if configmap is None:
        if source.get("optional"):
            return files
        raise NotRunnable("FailedMount", f"MountVolume.SetUp failed for volume {volume!r}: configmap "
                          f"{source.get('name')!r} not found")
    contents = {key: value.encode() for key, value in (configmap.get("data") or {}).items()}
    contents.update({key: base64.b64decode(value) for key, value in (configmap.get("binaryData") or {}).items()})
    items = source.get("items") or [{"key": key, "path": key} for key in sorted(contents)]
    for item in items:
        if item["key"] not in contents:
            if source.get("optional"):
                continue
            raise NotRunnable("FailedMount", f"configmap {source.get('name')!r} has no key {item['key']!r}")
        files[directory / relative_item_path(volume, item["path"])] = contents[item["key"]]
    return files


def termination_path(container: dict) -> str:
    return str(PurePosixPath(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH))


def relative_item_path(volume: str, path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts:
        raise NotRunnable("FailedMount", f"volume {volume!r}: item path {path!r} must be relative")
    return relative


def launch_spec(pod: dict, configmaps: dict, layout: PodLayout, base_env: dict[str, str],
                image: Image = TRAINER_IMAGE) -> LaunchSpec:
    """Everything needed to start the pod's container as a local process; NotRunnable says why not (yet)."""
    container = runtime_container(pod)
    roots = volume_roots(pod, layout)
    mounts = sorted([*mount_map(container, roots), (termination_path(container), layout.termination_file)],
                    key=lambda pair: len(pair[0]), reverse=True)
    image_env = {**dict(image.env), **base_env, "HOSTNAME": (pod.get("spec") or {}).get("hostname")
                 or pod["metadata"]["name"], "HOME": str(layout.home_dir)}
    env = resolve_env(pod, container, configmaps, image_env)
    argv = tuple(map_path(word, mounts) for word in command_line(container, env, image))
    env = {key: map_path(value, mounts) for key, value in env.items()}
    directories = (layout.work_dir, layout.home_dir, *sorted(set(roots.values())))
    files = {**configmap_files(pod, configmaps, layout), layout.termination_file: b""}  # empty, as the kubelet's
    return LaunchSpec(container=container["name"], argv=argv, env=env, cwd=layout.work_dir, files=files,
                      directories=directories, grace_seconds=grace_seconds(pod))
