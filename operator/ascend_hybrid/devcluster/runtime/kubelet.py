"""The two ways the runtime runs a pod's container (IO): as a local process group (`runtime: process`,
launch.py + process.py) or as a podman container of the pod's image (`runtime: container`, container.py +
volumes.py + podman.py + tokens.py). service.py drives both alike through Prepared: the process to start, the
files and directories its volumes need before the start, and the same files again on every sync.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from ascend_hybrid.devcluster.files import replace_file
from ascend_hybrid.devcluster.runtime.container import (
    ContainerSpec,
    ImageConfig,
    apiserver_env,
    container_spec,
    is_container_pod,
    log_file,
    run_arguments,
)
from ascend_hybrid.devcluster.runtime.launch import (
    NotRunnable,
    PodLayout,
    configmap_files,
    is_process_pod,
    launch_spec,
    runtime_container,
)
from ascend_hybrid.devcluster.runtime.podman import ContainerProcess, Podman, PodmanUnavailable
from ascend_hybrid.devcluster.runtime.process import PodProcess
from ascend_hybrid.devcluster.runtime.tokens import Tokens
from ascend_hybrid.devcluster.runtime.volumes import VolumeFile, volume_files


@dataclass
class Prepared:
    container: str
    process: PodProcess
    files: dict[Path, VolumeFile]
    directories: dict[Path, int | None]   # mode None: as made
    grace_seconds: float
    log_file: Path
    what: str                              # for the Started event

    def lay_out(self) -> None:
        """The directories and files the container needs before it starts."""
        for directory, bits in self.directories.items():
            directory.mkdir(parents=True, exist_ok=True)
            if bits is not None:
                directory.chmod(bits)
        for path, file in self.files.items():
            write_atomically(path, file)


def read_bytes(path: Path, tail: int | None = None) -> bytes:
    """A file's bytes (its last `tail` bytes), b"" when it is gone."""
    try:
        with open(path, "rb") as handle:
            if tail is not None:
                handle.seek(max(handle.seek(0, os.SEEK_END) - tail, 0))
            return handle.read()
    except OSError:
        return b""


def write_atomically(path: Path, file: VolumeFile) -> None:
    """As the kubelet swaps a ConfigMap volume: a reader sees the old file or the new one, never a half."""
    replace_file(path, file.content, file.mode)


def runtime_id(root: Path) -> str:
    """The label value of this runtime's containers: its directory, hashed (two clusters never share it)."""
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


def apiserver_address(api: client.ApiClient) -> tuple[str, int]:
    """Host and port of the apiserver the runtime talks to (https://127.0.0.1:<port> in a dev cluster)."""
    host = api.configuration.host.removeprefix("https://").removeprefix("http://").rstrip("/")
    name, _, port = host.rpartition(":")
    return (name, int(port)) if name else (host, 443)


class ProcessMode:
    """Pods as local process groups. Like a kubelet, the runtime gives each the apiserver's address
    (KUBERNETES_SERVICE_HOST/PORT) and its projected volumes, the ServiceAccount token among them (requested with
    the TokenRequest API, bound to the pod): the trainer's launcher reaches its recovery channel with it."""

    def __init__(self, base_env: dict[str, str], api: client.ApiClient | None = None, log=print):
        self.base_env = dict(base_env)
        self.tokens = Tokens(client.CoreV1Api(api), log) if api is not None else None
        if api is not None:
            self.base_env.update(apiserver_env(*apiserver_address(api)))

    def prepare(self, pod: dict, configmaps: dict, layout: PodLayout, restarts: int) -> Prepared:
        spec = launch_spec(pod, configmaps, layout, self.base_env)
        process = PodProcess(spec.argv, spec.env, spec.cwd, layout.log_file)
        files = {path: VolumeFile(content) for path, content in spec.files.items()}
        files.update(self.files(pod, configmaps, layout))
        return Prepared(spec.container, process, files, dict.fromkeys(spec.directories), spec.grace_seconds,
                        layout.log_file, f"a process group: {' '.join(spec.argv)}")

    def files(self, pod: dict, configmaps: dict, layout: PodLayout) -> dict[Path, VolumeFile]:
        if self.tokens is None:
            return {path: VolumeFile(content) for path, content in configmap_files(pod, configmaps, layout).items()}
        return volume_files(pod, configmaps, layout, self.tokens.for_pod(pod))

    def forget(self, uid: str) -> None:
        if self.tokens is not None:
            self.tokens.forget(uid)


class ContainerMode:
    def __init__(self, api: client.ApiClient, root: Path, log):
        self.root, self.log = root, log
        self.id = runtime_id(root)
        self.apiserver = apiserver_address(api)
        self.tokens = Tokens(client.CoreV1Api(api), log)
        self._podman: Podman | None = None

    def podman(self) -> Podman:
        """podman under hack/images.sh's config; NotRunnable while it is missing (`make images` makes it)."""
        if self._podman is None:
            try:
                self._podman = Podman.from_environment()
            except PodmanUnavailable as error:
                raise NotRunnable("CreateContainerError", str(error)) from None
        return self._podman

    def prepare(self, pod: dict, configmaps: dict, layout: PodLayout, restarts: int) -> Prepared:
        podman = self.podman()
        image = runtime_container(pod).get("image") or ""
        found = podman.inspect_image(image) if image else ImageConfig()  # no image: container_spec says so
        if found is None:
            raise NotRunnable("ErrImageNeverPull", f'Container image "{image}" is not present in the container '
                              f"runtime's storage (nothing is pulled here: build it with `make images`, or "
                              f"`podman load` it under CONTAINERS_STORAGE_CONF={podman.env['CONTAINERS_STORAGE_CONF']})")
        spec = container_spec(pod, configmaps, layout, found, self.apiserver, self.tokens.for_pod(pod), self.id,
                              restarts)
        process = ContainerProcess(podman, run_arguments(spec), spec.name, spec.cid_file, layout.directory,
                                   log_file(layout, restarts))
        return Prepared(spec.container, process, spec.files, spec.directories, spec.grace_seconds, spec.log_file,
                        f"podman container {spec.name} of image {spec.image}{_command(spec)}")

    def files(self, pod: dict, configmaps: dict, layout: PodLayout) -> dict[Path, VolumeFile]:
        return volume_files(pod, configmaps, layout, self.tokens.for_pod(pod))

    def forget(self, uid: str) -> None:
        self.tokens.forget(uid)

    def sweep(self) -> list[str]:
        """Removes every container this runtime's directory ever started (a killed runtime leaves them)."""
        return self.sweep_root(self.root)

    @staticmethod
    def sweep_root(root: Path) -> list[str]:
        try:
            return Podman.from_environment().sweep(runtime_id(root))
        except PodmanUnavailable:
            return []


def _command(spec: ContainerSpec) -> str:
    words = list(spec.entrypoint or ()) + list(spec.args or ())
    return f": {' '.join(words)}" if words else ""


class Modes:
    """Which pods the runtime runs, and how."""

    def __init__(self, process: ProcessMode, container: ContainerMode | None):
        self.process, self.container = process, container

    def runs(self, pod: dict) -> bool:
        return is_process_pod(pod) or (self.container is not None and is_container_pod(pod))

    def of(self, pod: dict) -> ProcessMode | ContainerMode:
        return self.container if self.container is not None and is_container_pod(pod) else self.process
