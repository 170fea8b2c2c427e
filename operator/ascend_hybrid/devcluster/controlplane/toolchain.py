"""Builds the simulated cluster's binaries from Go modules into a versioned cache.

No container engine and no binary downloads exist on the machines we target, so the real control plane
(etcd, kube-apiserver, kube-controller-manager, kube-scheduler), kubectl, kwok/kwokctl and helm are
compiled from the Go module proxy; so are the optional Kueue (whose CRDs and webhook manifest are copied out of the
same module) and Volcano's scheduler and controller manager (built as the main module, its CRDs copied out). The optional Prometheus is Debian's package, unpacked into the cache (`apt-get download`, no
install): building it from its module took 9.5 min of a cold CI run; where apt-get is missing it is built from
the module instead. Versions are pinned here and nowhere else.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
KUBERNETES_STAGING_VERSION = "v0.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.21.4"
PROMETHEUS_MODULE_VERSION = "v0.316.0"  # the Go build, where Debian's package cannot be had
PROMETHEUS_DEBIAN_PACKAGE = "prometheus=2.42.0+ds-5+deb12u1"  # bookworm's
KUEUE_VERSION = "v0.17.0"
KUEUE_MODULE = "sigs.k8s.io/kueue"
VOLCANO_VERSION = "v1.14.1"
VOLCANO_MODULE = "volcano.sh/volcano"
# v1.14.1 replaces its API module with a staging directory its module zip lacks, and the proxy serves no apis
# v1.14.1: the published v1.14.0 stands in for it (../shared/verified-recipes.md, "Volcano").
VOLCANO_APIS_VERSION = "v1.14.0"
VOLCANO_APIS_MODULE = "volcano.sh/apis"

BINARIES_ENV = "AHJ_TOOLCHAIN_BIN"
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
REQUIRED = (*KUBE_COMMANDS, "etcd", "kwok", "kwokctl", "helm")
OPTIONAL = ("prometheus",)
KUEUE = ("kueue",)
VOLCANO = ("vc-scheduler", "vc-controller-manager")
# Optional binaries whose version is not part of the cache's tag: a stamp file beside them names the version they
# were built from, and a binary whose stamp differs from the pin counts as missing (it is rebuilt).
STAMPED = {"kueue": KUEUE_VERSION, "prometheus": PROMETHEUS_DEBIAN_PACKAGE,
           **{name: VOLCANO_VERSION for name in VOLCANO}}


def versions_tag() -> str:
    return f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}_helm-{HELM_VERSION}"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-hybrid" / "toolchain" / versions_tag()


def bin_dir() -> Path:
    """Where the binaries are: the directory named by AHJ_TOOLCHAIN_BIN, else the cache."""
    override = os.environ.get(BINARIES_ENV)
    return Path(override) if override else cache_root() / "bin"


def _stamp(directory: Path, name: str) -> Path:
    return directory / f".{name}.version"


def missing(names: tuple[str, ...] = REQUIRED) -> list[str]:
    directory = bin_dir()
    return [name for name in names if not os.access(directory / name, os.X_OK) or _stale(directory, name)]


def _stale(directory: Path, name: str) -> bool:
    if name not in STAMPED:
        return False
    if name == "kueue" and not (kueue_manifests_dir() / "webhooks.yaml").is_file():
        return True
    if name in VOLCANO and not any((volcano_manifests_dir() / "crds").glob("*.yaml")):
        return True
    try:
        return _stamp(directory, name).read_text().strip() != STAMPED[name]
    except FileNotFoundError:
        return True


def kueue_manifests_dir() -> Path:
    """Kueue's CRDs (crds/*.yaml) and webhook manifest (webhooks.yaml), copied from the module it was built from."""
    return bin_dir().parent / f"kueue-{KUEUE_VERSION}"


def volcano_manifests_dir() -> Path:
    """Volcano's CRDs (crds/*.yaml, all of config/crd/volcano/bases), copied from the module it was built from."""
    return bin_dir().parent / f"volcano-{VOLCANO_VERSION}"


def binary(name: str) -> str:
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{name} is not built yet: run `ascend-hybrid dev-cluster build` (looked in {path.parent})")
    return str(path)


HEARTBEAT_SECONDS = 30


def _elapsed(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


@contextlib.contextmanager
def _progress(what: str, log):
    """Announces a build, repeats how long it has been running every HEARTBEAT_SECONDS, and reports its time:
    the apiserver alone compiles for minutes and a silent terminal looks hung."""
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            log(f"[toolchain] still building {what} ({_elapsed(time.monotonic() - started)})")

    log(f"[toolchain] building {what}")
    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
    log(f"[toolchain] built {what} in {_elapsed(time.monotonic() - started)}")


@contextlib.contextmanager
def _build_lock(path: Path, log):
    """One build at a time per cache: a second caller waits, then finds the binaries built."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"[toolchain] another build holds {path}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="0")
    return env


def _run(args: list[str], cwd: Path, log) -> None:
    result = subprocess.run(args, cwd=cwd, env=_go_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        log(result.stdout[-4000:])
        raise RuntimeError(f"toolchain step failed ({result.returncode}): {' '.join(args)}")


def _wrapper_module(path: Path, module: str, log) -> None:
    if (path / "go.mod").exists():
        return
    path.mkdir(parents=True, exist_ok=True)
    _run(["go", "mod", "init", module], path, log)
    _run(["go", "mod", "edit", "-go=1.26.0"], path, log)


def _kubernetes_staging_replaces(path: Path, log) -> list[str]:
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"],
        cwd=path, env=_go_env(), capture_output=True, text=True,
    )
    if result.returncode != 0:
        log(result.stderr[-4000:])
        raise RuntimeError("could not download the k8s.io/kubernetes module")
    gomod = Path(json.loads(result.stdout)["GoMod"]).read_text()
    replaced = []
    for line in gomod.splitlines():
        parts = line.replace("replace", "").split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            replaced.append(parts[0])
    if not replaced:
        raise RuntimeError("k8s.io/kubernetes go.mod lists no staging replaces; the recipe needs updating")
    return replaced


def _build_kubernetes(src: Path, out: Path, log) -> None:
    path = src / "kube"
    _wrapper_module(path, "local/kubebins", log)
    if not (path / ".resolved").exists():
        log(f"[toolchain] resolving k8s.io/kubernetes {KUBERNETES_VERSION} and its staging modules")
        for module in _kubernetes_staging_replaces(path, log):
            _run(["go", "mod", "edit", f"-replace={module}={module}@{KUBERNETES_STAGING_VERSION}"], path, log)
        for command in KUBE_COMMANDS:
            _run(["go", "get", "-tool", f"k8s.io/kubernetes/cmd/{command}@{KUBERNETES_VERSION}"], path, log)
        (path / ".resolved").touch()
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    ldflags = (
        f"-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}"
        f" -X k8s.io/component-base/version.gitMajor={major} -X k8s.io/component-base/version.gitMinor={minor}"
        f" -X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}"
    )
    for command in KUBE_COMMANDS:
        if (out / command).exists():
            continue
        with _progress(f"{command} {KUBERNETES_VERSION}", log):
            _run(["go", "build", "-trimpath", "-tags", "selinux,notest", "-ldflags", ldflags,
                  "-o", str(out / f".{command}.tmp"), f"k8s.io/kubernetes/cmd/{command}"], path, log)
        (out / f".{command}.tmp").rename(out / command)


def _build_etcd(src: Path, out: Path, log) -> None:
    path = src / "etcd"
    _wrapper_module(path, "local/etcdbin", log)
    _run(["go", "get", "-tool", f"go.etcd.io/etcd/server/v3@{ETCD_VERSION}"], path, log)
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / ".etcd.tmp"), "go.etcd.io/etcd/server/v3"], path, log)
    (out / ".etcd.tmp").rename(out / "etcd")


def _go_install(packages: list[str], out: Path, log, ldflags: str = "-s -w") -> None:
    env = _go_env()
    env["GOBIN"] = str(out)
    result = subprocess.run(["go", "install", "-trimpath", "-ldflags", ldflags, *packages], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out)
    if result.returncode != 0:
        log(result.stdout[-4000:])
        raise RuntimeError(f"go install failed: {' '.join(packages)}")


def _build_prometheus(src: Path, out: Path, log) -> None:
    """Debian's binary when apt-get can fetch it (about a second), else a build from the Go module (minutes)."""
    if shutil.which("apt-get") and shutil.which("dpkg-deb") and _unpack_debian_prometheus(src / "prometheus-deb", out, log):
        _stamp(out, "prometheus").write_text(PROMETHEUS_DEBIAN_PACKAGE + "\n")
        return
    path = src / "prometheus"
    _wrapper_module(path, "local/prometheusbin", log)
    _run(["go", "get", "-tool", f"github.com/prometheus/prometheus/cmd/prometheus@{PROMETHEUS_MODULE_VERSION}"], path, log)
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={PROMETHEUS_MODULE_VERSION}"
    _run(["go", "build", "-trimpath", "-ldflags", ldflags,
          "-o", str(out / ".prometheus.tmp"), "github.com/prometheus/prometheus/cmd/prometheus"], path, log)
    (out / ".prometheus.tmp").rename(out / "prometheus")
    # the Go build stands in for the pinned package: stamped so, it is kept until the package can be had
    _stamp(out, "prometheus").write_text(PROMETHEUS_DEBIAN_PACKAGE + "\n")


def _unpack_debian_prometheus(work: Path, out: Path, log) -> bool:
    """`apt-get download` of the pinned package (after `apt-get update` when the lists lack it), then its
    /usr/bin/prometheus out of `dpkg-deb -x`: nothing is installed on the machine. False when it cannot be had."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    download = ["apt-get", "download", "-q", PROMETHEUS_DEBIAN_PACKAGE]
    fetched = subprocess.run(download, cwd=work, capture_output=True, text=True)
    if fetched.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
        fetched = subprocess.run(download, cwd=work, capture_output=True, text=True)
    packages = sorted(work.glob("prometheus_*.deb"))
    if fetched.returncode != 0 or not packages:
        log(f"[toolchain] Debian's {PROMETHEUS_DEBIAN_PACKAGE} not available ({(fetched.stderr or '').strip()[-300:]}); "
            "building Prometheus from its Go module instead")
        return False
    _run(["dpkg-deb", "-x", str(packages[0]), str(work / "root")], work, log)
    (work / "root" / "usr" / "bin" / "prometheus").replace(out / "prometheus")
    shutil.rmtree(work, ignore_errors=True)
    return True


KUEUE_CRDS = "config/components/crd/bases"
KUEUE_WEBHOOKS = "config/components/webhook/manifests.yaml"


def _module_download(module: str, version: str, cwd: Path, log) -> dict:
    result = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=cwd, env=_go_env(),
                            capture_output=True, text=True)
    if result.returncode != 0:
        log(result.stderr[-4000:] or result.stdout[-4000:])
        raise RuntimeError(f"could not download the {module}@{version} module")
    return json.loads(result.stdout)


def _build_kueue(src: Path, out: Path, log) -> None:
    """The manager from its module, with the version variables its Makefile sets (else it reports v0.0.0-main):
    the commit is the module's checksum (the proxy does not carry the git commit), the date the module's."""
    src.mkdir(parents=True, exist_ok=True)
    module = _module_download(KUEUE_MODULE, KUEUE_VERSION, src, log)
    released = json.loads(Path(module["Info"]).read_text()).get("Time", "")
    version_package = f"{KUEUE_MODULE}/pkg/version"
    ldflags = (f"-s -w -X {version_package}.GitVersion={KUEUE_VERSION} -X {version_package}.GitCommit={module['Sum']}"
               f" -X {version_package}.BuildDate={released}")
    _go_install([f"{KUEUE_MODULE}/cmd/kueue@{KUEUE_VERSION}"], out, log, ldflags=ldflags)
    _copy_kueue_manifests(Path(module["Dir"]), kueue_manifests_dir())
    _stamp(out, "kueue").write_text(KUEUE_VERSION + "\n")


def _copy_kueue_manifests(module_dir: Path, target: Path) -> None:
    crds = sorted((module_dir / KUEUE_CRDS).glob("*.yaml"))
    if not crds or not (module_dir / KUEUE_WEBHOOKS).is_file():
        raise RuntimeError(f"{module_dir} lacks {KUEUE_CRDS}/*.yaml or {KUEUE_WEBHOOKS}: the recipe needs updating")
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "crds").mkdir(parents=True)
    for crd in crds:
        (staging / "crds" / crd.name).write_bytes(crd.read_bytes())
    (staging / "webhooks.yaml").write_bytes((module_dir / KUEUE_WEBHOOKS).read_bytes())
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


VOLCANO_CRDS = "config/crd/volcano/bases"
VOLCANO_COMMANDS = {"vc-scheduler": "./cmd/scheduler", "vc-controller-manager": "./cmd/controller-manager"}


def _build_volcano(src: Path, out: Path, log) -> None:
    """vc-scheduler and vc-controller-manager from a writable copy of the module, its apis replace pointed at the
    published module; the version variables as its Makefile sets them (the commit: the module's checksum)."""
    src.mkdir(parents=True, exist_ok=True)
    module = _module_download(VOLCANO_MODULE, VOLCANO_VERSION, src, log)
    released = json.loads(Path(module["Info"]).read_text()).get("Time", "")
    tree = src / f"volcano-{VOLCANO_VERSION}"
    _writable_copy(Path(module["Dir"]), tree)
    _run(["go", "mod", "edit", f"-replace={VOLCANO_APIS_MODULE}={VOLCANO_APIS_MODULE}@{VOLCANO_APIS_VERSION}"],
         tree, log)
    _run(["go", "mod", "tidy"], tree, log)
    version_package = f"{VOLCANO_MODULE}/pkg/version"
    ldflags = (f"-s -w -X {version_package}.Version={VOLCANO_VERSION} -X {version_package}.GitSHA={module['Sum']}"
               f" -X {version_package}.Built={released}")
    for name, package in VOLCANO_COMMANDS.items():
        _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(out / f".{name}.tmp"), package], tree, log)
        (out / f".{name}.tmp").rename(out / name)
    _copy_volcano_crds(tree, volcano_manifests_dir())
    for name in VOLCANO:
        _stamp(out, name).write_text(VOLCANO_VERSION + "\n")
    shutil.rmtree(tree, ignore_errors=True)  # the module cache keeps the source; the CRDs are copied out


def _writable_copy(source: Path, target: Path) -> None:
    """The module cache's tree is read-only: copied file by file (no permission bits), directories made writable."""
    if target.exists():
        _make_writable(target)
        shutil.rmtree(target)
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    _make_writable(target)


def _make_writable(tree: Path) -> None:
    for directory, _, _ in os.walk(tree):
        os.chmod(directory, 0o755)


def _copy_volcano_crds(tree: Path, target: Path) -> None:
    crds = sorted((tree / VOLCANO_CRDS).glob("*.yaml"))
    if not crds:
        raise RuntimeError(f"{tree} lacks {VOLCANO_CRDS}/*.yaml: the recipe needs updating")
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "crds").mkdir(parents=True)
    for crd in crds:
        (staging / "crds" / crd.name).write_bytes(crd.read_bytes())
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def ensure(with_prometheus: bool = False, log=None, with_kueue: bool = False, with_volcano: bool = False) -> Path:
    """Builds every binary that is missing; returns the bin directory. Idempotent, resumable, and safe to call
    from several processes at once (they wait on a lock)."""
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    out = bin_dir()
    wanted = (REQUIRED + (OPTIONAL if with_prometheus else ()) + (KUEUE if with_kueue else ())
              + (VOLCANO if with_volcano else ()))
    if not missing(wanted):
        return out
    if os.environ.get(BINARIES_ENV):
        raise FileNotFoundError(f"{BINARIES_ENV}={out} lacks {', '.join(missing(wanted))}")
    if shutil.which("go") is None:
        raise FileNotFoundError("Go is needed to build the simulated cluster's binaries (go1.26 or newer)")
    with _build_lock(cache_root() / ".build.lock", log):
        todo = missing(wanted)  # a build we waited for may have made them
        if todo:
            _build(todo, out, log)
    return out


def _build(todo: list[str], out: Path, log) -> None:
    out.mkdir(parents=True, exist_ok=True)
    src = cache_root() / "src"
    steps = [
        ("etcd", f"etcd {ETCD_VERSION}", lambda: _build_etcd(src, out, log)),
        ("kwok", f"kwok + kwokctl {KWOK_VERSION}",
         lambda: _go_install([f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}",
                              f"sigs.k8s.io/kwok/cmd/kwokctl@{KWOK_VERSION}"], out, log)),
        ("helm", f"helm {HELM_VERSION}", lambda: _go_install([f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"], out, log)),
        ("kube", None, lambda: _build_kubernetes(src, out, log)),  # announces each of its four binaries
        ("prometheus", f"prometheus ({PROMETHEUS_DEBIAN_PACKAGE} from Debian)", lambda: _build_prometheus(src, out, log)),
        ("kueue", f"kueue {KUEUE_VERSION} (and its CRDs)", lambda: _build_kueue(src / "kueue", out, log)),
        ("volcano", f"volcano {VOLCANO_VERSION} scheduler + controller manager (and its CRDs)",
         lambda: _build_volcano(src / "volcano", out, log)),
    ]
    owners = {"etcd": "etcd", "kwok": "kwok", "kwokctl": "kwok", "helm": "helm", "prometheus": "prometheus",
              "kueue": "kueue", **{name: "kube" for name in KUBE_COMMANDS}, **{name: "volcano" for name in VOLCANO}}
    started = time.monotonic()
    log(f"[toolchain] building {', '.join(todo)} into {out} (first time only: ~20 min cold on 2 cores, "
        "~10 GB of Go caches)")
    for step, what, action in steps:
        if not any(owners[name] == step for name in todo):
            continue
        if what is None:
            action()
        else:
            with _progress(what, log):
                action()
    log(f"[toolchain] done in {_elapsed(time.monotonic() - started)}: {out}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with_prometheus = "--with-prometheus" in argv
    try:
        path = ensure(with_prometheus=with_prometheus, with_kueue="--with-kueue" in argv,
                      with_volcano="--with-volcano" in argv)
    except (RuntimeError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
