"""podman for the container runtime (IO): the private config hack/images.sh writes, the images it built, and one
pod's container as an attached `podman run` whose output and exit code are the container's.

Every call runs with CONTAINERS_CONF and CONTAINERS_STORAGE_CONF pointing at ~/.cache/ascend-hybrid/containers/
(or $AHJ_CACHE_DIR/containers, as hack/images.sh; variables already set win), so the runtime sees exactly what
`make images` built and never touches the machine's global container config or storage. Containers carry the
runtime's label, so a runtime that starts finds and removes what a killed one left (sweep), and `down` too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from ascend_hybrid.devcluster.runtime.container import CONTAINER_ID_SCHEME, RUNTIME_LABEL, ImageConfig
from ascend_hybrid.devcluster.runtime.process import PodProcess

CALL_TIMEOUT_SECONDS = 60
CONFIG_ENV = ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF")


def config_dir() -> Path:
    """Where hack/images.sh keeps containers.conf and storage.conf."""
    cache = os.environ.get("AHJ_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ascend-hybrid")
    return Path(cache) / "containers"


class PodmanUnavailable(RuntimeError):
    pass


class Podman:
    def __init__(self, binary: str, env: dict[str, str]):
        self.binary, self.env = binary, env

    @classmethod
    def from_environment(cls) -> Podman:
        """podman under the private config; PodmanUnavailable says what is missing (podman, or the config that
        `make images` writes)."""
        binary = shutil.which("podman")
        if binary is None:
            raise PodmanUnavailable("podman is not installed: `make images` (hack/images.sh) installs it and builds "
                                    "the images")
        env = dict(os.environ)
        directory = config_dir()
        env.setdefault("CONTAINERS_CONF", str(directory / "containers.conf"))
        env.setdefault("CONTAINERS_STORAGE_CONF", str(directory / "storage.conf"))
        missing = [env[key] for key in CONFIG_ENV if not Path(env[key]).is_file()]
        if missing:
            raise PodmanUnavailable(f"no podman config at {', '.join(missing)}: run `make images` (hack/images.sh) "
                                    "first")
        return cls(binary, env)

    def call(self, *args: str, timeout: float = CALL_TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
        return subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def inspect_image(self, image: str) -> ImageConfig | None:
        """The image's config, or None when local storage lacks it (nothing is ever pulled)."""
        result = self.call("image", "inspect", "--format", "{{json .Config}}", image)
        if result.returncode != 0:
            return None
        config = json.loads(result.stdout or "{}") or {}
        return ImageConfig(user=config.get("User") or "")

    def kill(self, name: str, signum: int) -> None:
        self.call("kill", "--signal", signal.Signals(signum).name.removeprefix("SIG"), name)

    def remove(self, name: str) -> None:
        self.call("rm", "--force", "--ignore", "--time", "0", name)

    def labelled(self, runtime_id: str) -> list[str]:
        """Names of every container of this runtime, running or not."""
        result = self.call("ps", "--all", "--filter", f"label={RUNTIME_LABEL}={runtime_id}", "--format",
                           "{{.Names}}")
        return result.stdout.split() if result.returncode == 0 else []

    def sweep(self, runtime_id: str) -> list[str]:
        """Removes every container of this runtime (force: running ones are killed); their names."""
        names = self.labelled(runtime_id)
        for name in names:
            self.remove(name)
        return names


class ContainerProcess(PodProcess):
    """`podman run` (attached) as the pod's process: its stdout and stderr pumped into the CRI log, its exit code
    the container's. Signals go to the container (podman kill), not to the client: the container outlives a
    killed client, and is removed once the client has ended."""

    def __init__(self, podman: Podman, run_args: list[str], name: str, cid_file: Path, cwd: Path, log_file: Path):
        super().__init__((podman.binary, *run_args), podman.env, cwd, log_file)
        self.podman, self.name, self.cid_file = podman, name, cid_file
        self.killed = False

    def container_id(self) -> str | None:
        """podman://<id> once podman created the container (it writes the id file then), else None."""
        try:
            identifier = self.cid_file.read_text().strip()
        except OSError:
            return None
        return f"{CONTAINER_ID_SCHEME}{identifier}" if identifier else None

    def start(self) -> int:
        self.cid_file.unlink(missing_ok=True)
        return super().start()

    def signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        self.podman.kill(self.name, signum)
        if signum == signal.SIGKILL:
            if self.killed:  # a second SIGKILL: the client hangs on a container that is gone; end it too
                super().signal_group(signal.SIGKILL)
            self.killed = True

    def end_rest(self) -> None:
        super().signal_group(signal.SIGKILL)  # the client's own group, should anything of it be left
        self.podman.remove(self.name)  # gone already (--rm), unless the client was killed before the container
