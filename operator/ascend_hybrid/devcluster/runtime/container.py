"""Pure side of the container runtime's "kubelet": what one pod's container becomes as a `podman run`.

A pod annotated `sim.hybrid.ascend.dev/runtime: container` runs its image with podman (the private
containers.conf/storage.conf of hack/images.sh) on the host network: the pod's IP (127.16.x.y) is an address of
the host's loopback, so what binds its pod IP or 127.0.0.1 in the container binds it on the host, and nothing
else is reachable. From the pod, the ConfigMaps it names, the image's config and the apiserver's address:
- the command line (`command` replaces the image's ENTRYPOINT and drops its CMD, `args` replace CMD;
  `$(VAR)` expanded);
- the env: the container's (downward API and ConfigMap references resolved, launch.resolve_env), after the
  KUBERNETES_SERVICE_HOST/PORT a kubelet puts first, here the apiserver on 127.0.0.1 (its real port: there is
  no kube-proxy for the `kubernetes` Service, whose endpoints are the apiserver's own address);
- the mounts: ConfigMap, downward API and projected volumes (the ServiceAccount token among them) are files
  under the pod's directory (volumes.py), bind-mounted read-only, so their updates reach the container;
  emptyDir and PersistentVolumeClaim volumes are writable directories (claims outlive the pod);
- the security context: runAsUser/runAsGroup, supplementalGroups and fsGroup, runAsNonRoot (checked against the
  image's user), readOnlyRootFilesystem, allowPrivilegeEscalation, capabilities, privileged, seccomp.
Volume paths are never rewritten: the container sees the paths its spec names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ascend_hybrid.devcluster.runtime.launch import (
    RUNTIME_ANNOTATION,
    NotRunnable,
    PodLayout,
    expand_references,
    grace_seconds,
    resolve_env,
    runtime_container,
    termination_path,
    volume_roots,
)
from ascend_hybrid.devcluster.runtime.volumes import TokenSource, VolumeFile, volume_files

CONTAINER_RUNTIME = "container"
LABEL_PREFIX = "sim.hybrid.ascend.dev/"
RUNTIME_LABEL = LABEL_PREFIX + "runtime-root"  # which runtime's container it is (a hash of its directory)
POD_UID_LABEL = LABEL_PREFIX + "pod-uid"
POD_LABEL = LABEL_PREFIX + "pod"
CONTAINER_ID_SCHEME = "podman://"
FILE_VOLUMES = ("configMap", "downwardAPI", "projected")   # files written by the runtime, mounted read-only
WRITABLE_MODE = 0o777  # emptyDir and claim directories, as the kubelet makes an emptyDir: any user may write
TERMINATION_FILE_MODE = 0o666  # the terminationMessagePath file: whatever user the image runs as writes it


@dataclass(frozen=True)
class ImageConfig:
    """What the runtime reads of the image (podman image inspect): its default user (Config.User)."""

    user: str = ""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class ContainerSpec:
    container: str                 # the pod's container name
    name: str                      # podman's container name
    image: str
    entrypoint: tuple[str, ...] | None   # None: the image's ENTRYPOINT
    args: tuple[str, ...] | None         # None: the image's CMD
    env: dict[str, str]
    mounts: tuple[Mount, ...]
    files: dict[Path, VolumeFile]
    directories: dict[Path, int | None]  # to exist before the start, with the mode to give them (None: as made)
    hostname: str
    workdir: str | None
    user: str | None
    groups: tuple[int, ...]
    security: tuple[str, ...]            # podman flags of the security context
    labels: dict[str, str]
    cid_file: Path
    log_file: Path
    grace_seconds: float


def is_container_pod(pod: dict) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(RUNTIME_ANNOTATION) == CONTAINER_RUNTIME


def container_name(pod: dict, container: str, restarts: int) -> str:
    """As the kubelet's Docker integration named them: k8s_<container>_<pod>_<namespace>_<uid>_<attempt>."""
    meta = pod["metadata"]
    return f"k8s_{container}_{meta['name']}_{meta['namespace']}_{meta['uid']}_{restarts}"


def log_file(layout: PodLayout, restarts: int) -> Path:
    """The CRI log of the container's `restarts`-th restart (the first run writes container.log)."""
    return layout.log_file if restarts == 0 else layout.directory / f"container.{restarts}.log"


def apiserver_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables, pointing at the apiserver itself."""
    url = f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": url, prefix: url,
            f"{prefix}_PROTO": "tcp", f"{prefix}_PORT": str(port), f"{prefix}_ADDR": host}


def _mounts(pod: dict, container: dict, layout: PodLayout, env: dict[str, str]) -> tuple[list[Mount], dict]:
    volumes = {volume["name"]: volume for volume in (pod.get("spec") or {}).get("volumes") or []}
    roots = volume_roots(pod, layout)  # emptyDir, ConfigMap and claims, as the process runtime maps them
    mounts, directories = [], {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise NotRunnable("CreateContainerConfigError", f"volumeMount {mount['name']!r} names no volume")
        files = any(kind in volume for kind in FILE_VOLUMES)
        writable = "emptyDir" in volume or "persistentVolumeClaim" in volume
        if not files and not writable:
            kind = next((key for key in volume if key != "name"), "?")
            raise NotRunnable("CreateContainerConfigError", f"volume {mount['name']!r}: {kind} volumes are not "
                              "supported by the container runtime (configMap, downwardAPI, projected, emptyDir "
                              "and persistentVolumeClaim are)")
        root = layout.volume_dir(mount["name"]) if files else roots[mount["name"]]
        directories[root] = None if files else WRITABLE_MODE
        sub_path = mount.get("subPath") or expand_references(mount.get("subPathExpr") or "", env)
        source = root
        if sub_path:
            relative = PurePosixPath(sub_path)
            if relative.is_absolute() or ".." in relative.parts:
                raise NotRunnable("CreateContainerConfigError", f"volumeMount {mount['name']!r}: subPath "
                                  f"{sub_path!r} must be relative")
            source = root / relative
            if writable:
                directories.setdefault(source, WRITABLE_MODE)
        claim_read_only = (volume.get("persistentVolumeClaim") or {}).get("readOnly", False)
        mounts.append(Mount(source, str(PurePosixPath(mount["mountPath"])),
                            files or bool(mount.get("readOnly")) or claim_read_only))
    return mounts, directories


def _security_value(pod: dict, container: dict, key: str):
    """The container's securityContext field, else the pod's (as the API defines the precedence)."""
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else ((pod.get("spec") or {}).get("securityContext") or {}).get(key)


def _user(pod: dict, container: dict, image: ImageConfig) -> str | None:
    uid, gid = _security_value(pod, container, "runAsUser"), _security_value(pod, container, "runAsGroup")
    image_user = image.user.split(":", 1)[0]
    if _security_value(pod, container, "runAsNonRoot"):
        if uid is None and not image_user.isdigit() and image_user not in ("", "root"):
            raise NotRunnable("CreateContainerConfigError", f"container has runAsNonRoot and image has non-numeric "
                              f"user ({image_user}), cannot verify user is non-root")
        resolved = uid if uid is not None else (int(image_user) if image_user.isdigit() else 0)
        if resolved == 0:
            raise NotRunnable("CreateContainerConfigError", "container has runAsNonRoot and image will run as root")
    if uid is None and gid is None:
        return None
    return f"{uid if uid is not None else (image_user or '0')}" + (f":{gid}" if gid is not None else "")


def _groups(pod: dict) -> tuple[int, ...]:
    context = (pod.get("spec") or {}).get("securityContext") or {}
    groups = list(context.get("supplementalGroups") or [])
    if context.get("fsGroup") is not None:
        groups.append(context["fsGroup"])
    return tuple(dict.fromkeys(int(group) for group in groups))


def _security_flags(pod: dict, container: dict) -> tuple[str, ...]:
    own = container.get("securityContext") or {}
    flags = []
    if own.get("privileged"):
        flags.append("--privileged")
    if own.get("readOnlyRootFilesystem"):
        flags += ["--read-only", "--read-only-tmpfs=false"]  # the kubelet adds no tmpfs: the pod mounts its own
    if own.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    capabilities = own.get("capabilities") or {}
    flags += [flag for cap in capabilities.get("drop") or [] for flag in ("--cap-drop", cap.lower())]
    flags += [flag for cap in capabilities.get("add") or [] for flag in ("--cap-add", cap.lower())]
    seccomp = _security_value(pod, container, "seccompProfile") or {}
    if seccomp.get("type") == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    elif seccomp.get("type") == "Localhost":
        raise NotRunnable("CreateContainerConfigError", "seccompProfile Localhost is not supported by the container "
                          "runtime (RuntimeDefault and Unconfined are)")
    return tuple(flags)


def container_spec(pod: dict, configmaps: dict, layout: PodLayout, image: ImageConfig, apiserver: tuple[str, int],
                   tokens: dict[TokenSource, str], runtime_id: str, restarts: int = 0) -> ContainerSpec:
    """Everything needed to `podman run` the pod's container; NotRunnable says why not (yet)."""
    container = runtime_container(pod)
    if not container.get("image"):
        raise NotRunnable("InvalidImageName", f"container {container['name']!r} names no image")
    env = resolve_env(pod, container, configmaps, apiserver_env(*apiserver))
    command, args = container.get("command"), container.get("args")
    entrypoint = tuple(expand_references(word, env) for word in command) if command else None
    arguments = tuple(expand_references(word, env) for word in args) if args else (() if command else None)
    mounts, directories = _mounts(pod, container, layout, env)
    # The kubelet mounts a fresh, empty file at terminationMessagePath for every run of the container.
    mounts.append(Mount(layout.termination_file, termination_path(container), False))
    files = {**volume_files(pod, configmaps, layout, tokens),
             layout.termination_file: VolumeFile(b"", TERMINATION_FILE_MODE)}
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return ContainerSpec(
        container=container["name"], name=container_name(pod, container["name"], restarts),
        image=container["image"], entrypoint=entrypoint, args=arguments, env=env, mounts=tuple(mounts),
        files=files, directories=directories,
        hostname=spec.get("hostname") or meta["name"], workdir=container.get("workingDir"),
        user=_user(pod, container, image), groups=_groups(pod), security=_security_flags(pod, container),
        labels={RUNTIME_LABEL: runtime_id, POD_UID_LABEL: meta["uid"], POD_LABEL: f"{meta['namespace']}.{meta['name']}"},
        cid_file=layout.directory / f"container.{restarts}.cid", log_file=log_file(layout, restarts),
        grace_seconds=grace_seconds(pod))


def run_arguments(spec: ContainerSpec) -> list[str]:
    """`podman run …` (without the program): attached, so its stdout and stderr are the container's and its exit
    code is the container's; removed once it exits. The host network, always: never podman's bridge."""
    argv = ["run", "--rm", "--network", "host", "--pull", "never", "--name", spec.name, "--cidfile",
            str(spec.cid_file), "--hostname", spec.hostname, "--log-driver", "none"]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    for mount in spec.mounts:
        argv += ["--mount", f"type=bind,source={mount.source},destination={mount.target}"
                 + (",ro=true" if mount.read_only else "")]
    if spec.user is not None:
        argv += ["--user", spec.user]
    for group in spec.groups:
        argv += ["--group-add", str(group)]
    if spec.workdir:
        argv += ["--workdir", spec.workdir]
    argv += list(spec.security)
    if spec.entrypoint is not None:
        argv += ["--entrypoint", json.dumps(list(spec.entrypoint))]
    argv.append(spec.image)
    return argv + list(spec.args or ())
