"""The toolchain builder's bookkeeping (no Go build runs: the build steps are replaced by fakes)."""

import os
from pathlib import Path

import pytest

from ascend_hybrid.devcluster.controlplane import toolchain


def make_executables(directory: Path, names) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(toolchain.BINARIES_ENV, raising=False)
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: "/usr/bin/go")
    return tmp_path / "cache"


@pytest.fixture
def fake_steps(monkeypatch):
    built = []

    def fake_kube(src, out, log):
        for name in toolchain.KUBE_COMMANDS:
            if not (out / name).exists():
                built.append(name)
                make_executables(out, [name])

    def fake_install(packages, out, log, ldflags="-s -w"):
        names = [p.split("@")[0].rsplit("/", 1)[1] for p in packages]
        built.extend(names)
        installed_with[tuple(names)] = ldflags
        make_executables(out, names)

    installed_with: dict = {}
    monkeypatch.setattr(toolchain, "_installed_with", installed_with, raising=False)

    monkeypatch.setattr(toolchain, "_build_etcd", lambda src, out, log: (built.append("etcd"),
                                                                        make_executables(out, ["etcd"])))
    monkeypatch.setattr(toolchain, "_go_install", fake_install)
    monkeypatch.setattr(toolchain, "_build_kubernetes", fake_kube)
    return built


def test_versions_are_pinned_in_the_cache_path(cache):
    assert toolchain.bin_dir() == cache / "ascend-hybrid" / "toolchain" / toolchain.versions_tag() / "bin"
    for version in (toolchain.KUBERNETES_VERSION, toolchain.ETCD_VERSION, toolchain.KWOK_VERSION,
                    toolchain.HELM_VERSION):
        assert version in toolchain.versions_tag()


def test_builds_only_what_is_missing_and_says_what_and_how_long(cache, fake_steps):
    make_executables(toolchain.bin_dir(), ["etcd", "helm", "kube-apiserver"])
    lines = []
    assert toolchain.ensure(log=lines.append) == toolchain.bin_dir()
    assert sorted(fake_steps) == sorted(["kwok", "kwokctl", "kube-controller-manager", "kube-scheduler", "kubectl"])
    text = "\n".join(lines)
    assert "building kwok + kwokctl" in text and "built kwok + kwokctl" in text and " in " in text
    assert toolchain.missing() == []
    fake_steps.clear()
    assert toolchain.ensure(log=lines.append) == toolchain.bin_dir()
    assert fake_steps == []


def test_a_directory_of_existing_binaries_is_used_as_is(tmp_path, monkeypatch, fake_steps):
    monkeypatch.setenv(toolchain.BINARIES_ENV, str(tmp_path / "mine"))
    make_executables(tmp_path / "mine", toolchain.REQUIRED)
    assert toolchain.ensure(log=lambda line: None) == tmp_path / "mine"
    assert toolchain.binary("kwokctl") == str(tmp_path / "mine" / "kwokctl")
    assert fake_steps == []


def test_an_incomplete_binaries_directory_is_an_error_naming_what_lacks(tmp_path, monkeypatch, fake_steps):
    monkeypatch.setenv(toolchain.BINARIES_ENV, str(tmp_path / "mine"))
    make_executables(tmp_path / "mine", ["etcd"])
    with pytest.raises(FileNotFoundError, match=f"{toolchain.BINARIES_ENV}=.*kube-apiserver"):
        toolchain.ensure(log=lambda line: None)
    assert fake_steps == []


def test_missing_binary_error_says_how_to_build(cache):
    with pytest.raises(FileNotFoundError, match="dev-cluster build"):
        toolchain.binary("etcd")


def test_no_go_is_a_clear_error(cache, monkeypatch):
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="Go is needed"):
        toolchain.ensure(log=lambda line: None)


def test_long_builds_report_their_elapsed_time(monkeypatch):
    monkeypatch.setattr(toolchain, "HEARTBEAT_SECONDS", 0.05)
    lines = []
    with toolchain._progress("kube-apiserver v1", lines.append):
        import time
        time.sleep(0.2)
    assert lines[0] == "[toolchain] building kube-apiserver v1"
    assert any(line.startswith("[toolchain] still building kube-apiserver v1 (") for line in lines)
    assert lines[-1].startswith("[toolchain] built kube-apiserver v1 in ")


def test_the_build_lock_is_exclusive(tmp_path):
    import fcntl

    lock = tmp_path / "lock"
    with toolchain._build_lock(lock, lambda line: None):
        with open(lock) as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert os.path.exists(lock)


def fake_kueue_module(tmp_path: Path) -> dict:
    """What `go mod download -json sigs.k8s.io/kueue@…` answers, over a module tree with Kueue's files."""
    module = tmp_path / "kueue-module"
    (module / "config/components/crd/bases").mkdir(parents=True)
    for plural in ("workloads", "clusterqueues"):
        (module / f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml").write_text(f"kind: {plural}\n")
    (module / "config/components/webhook").mkdir(parents=True)
    (module / "config/components/webhook/manifests.yaml").write_text("kind: MutatingWebhookConfiguration\n")
    info = tmp_path / "v.info"
    info.write_text('{"Version": "v0.17.0", "Time": "2026-03-31T10:20:15Z"}')
    return {"Dir": str(module), "Info": str(info), "Sum": "h1:abc="}


def test_kueue_is_built_only_on_request_with_its_version_and_its_crds_from_the_same_module(
        cache, fake_steps, monkeypatch, tmp_path):
    make_executables(toolchain.bin_dir(), toolchain.REQUIRED)
    module = fake_kueue_module(tmp_path)
    monkeypatch.setattr(toolchain, "_module_download", lambda name, version, cwd, log: module)
    toolchain.ensure(log=lambda line: None)
    assert fake_steps == [] and toolchain.missing(toolchain.KUEUE) == ["kueue"]
    lines = []
    toolchain.ensure(with_kueue=True, log=lines.append)
    assert fake_steps == ["kueue"] and toolchain.missing(toolchain.KUEUE) == []
    assert any(line.startswith("[toolchain] built kueue v0.17.0") for line in lines)
    ldflags = toolchain._installed_with[("kueue",)]
    assert "-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0" in ldflags, "not v0.0.0-main"
    assert "-X sigs.k8s.io/kueue/pkg/version.GitCommit=h1:abc=" in ldflags
    assert "-X sigs.k8s.io/kueue/pkg/version.BuildDate=2026-03-31T10:20:15Z" in ldflags
    manifests = toolchain.kueue_manifests_dir()
    assert sorted(p.name for p in (manifests / "crds").iterdir()) == [
        "kueue.x-k8s.io_clusterqueues.yaml", "kueue.x-k8s.io_workloads.yaml"]
    assert (manifests / "webhooks.yaml").read_text().startswith("kind: MutatingWebhookConfiguration")


def test_a_kueue_built_from_another_pin_or_without_its_crds_is_rebuilt(cache, fake_steps, monkeypatch, tmp_path):
    make_executables(toolchain.bin_dir(), toolchain.REQUIRED)
    module = fake_kueue_module(tmp_path)
    monkeypatch.setattr(toolchain, "_module_download", lambda name, version, cwd, log: module)
    toolchain.ensure(with_kueue=True, log=lambda line: None)
    (toolchain.bin_dir() / ".kueue.version").write_text("v0.16.2\n")
    assert toolchain.missing(toolchain.KUEUE) == ["kueue"]
    toolchain.ensure(with_kueue=True, log=lambda line: None)
    assert toolchain.missing(toolchain.KUEUE) == [] and fake_steps == ["kueue", "kueue"]
    (toolchain.kueue_manifests_dir() / "webhooks.yaml").unlink()
    assert toolchain.missing(toolchain.KUEUE) == ["kueue"]


def test_a_module_without_kueues_files_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="recipe needs updating"):
        toolchain._copy_kueue_manifests(tmp_path, tmp_path / "out")


def fake_volcano_module(tmp_path: Path) -> dict:
    """What `go mod download -json volcano.sh/volcano@…` answers, over a read-only tree as the module cache keeps
    it: a go.mod with the staging replace and the CRDs."""
    module = tmp_path / "volcano-module"
    (module / "config/crd/volcano/bases").mkdir(parents=True)
    for name in ("scheduling.volcano.sh_podgroups.yaml", "nodeinfo.volcano.sh_numatopologies.yaml"):
        (module / "config/crd/volcano/bases" / name).write_text(f"kind: CustomResourceDefinition # {name}\n")
    (module / "go.mod").write_text("module volcano.sh/volcano\nreplace volcano.sh/apis => ./staging/src/volcano.sh/apis\n")
    for directory, _, files in os.walk(module):
        for name in files:
            os.chmod(Path(directory) / name, 0o444)
    for directory, _, _ in sorted(os.walk(module), reverse=True):
        os.chmod(directory, 0o555)
    info = tmp_path / "v.info"
    info.write_text('{"Version": "v1.14.1", "Time": "2026-02-11T08:00:00Z"}')
    return {"Dir": str(module), "Info": str(info), "Sum": "h1:vc="}


@pytest.fixture
def go_steps(monkeypatch, tmp_path):
    """Replaces the Go commands of the Volcano build: records each, `go build -o X` leaves an executable X, and
    the copied tree must be writable when `go mod` edits it."""
    commands: list[tuple[list[str], Path]] = []

    def fake_run(args, cwd, log):
        commands.append((list(args), Path(cwd)))
        if args[:3] == ["go", "mod", "edit"]:
            # permission bits, not a write attempt: root writes through read-only modes
            assert os.stat(cwd).st_mode & 0o200 and os.stat(Path(cwd) / "go.mod").st_mode & 0o200
            assert os.stat(Path(cwd) / "config/crd").st_mode & 0o200
            (Path(cwd) / "go.mod").write_text((Path(cwd) / "go.mod").read_text() + "edited\n")
            (Path(cwd) / "go.sum").write_text("")
        if args[:2] == ["go", "build"]:
            output = Path(args[args.index("-o") + 1])
            make_executables(output.parent, [output.name])

    monkeypatch.setattr(toolchain, "_run", fake_run)
    yield commands
    for directory, _, _ in os.walk(tmp_path):  # let pytest remove the read-only fake module
        os.chmod(directory, 0o755)


def test_volcano_is_built_from_a_writable_copy_with_the_published_apis_and_its_crds(
        cache, fake_steps, go_steps, monkeypatch, tmp_path):
    make_executables(toolchain.bin_dir(), toolchain.REQUIRED)
    module = fake_volcano_module(tmp_path)
    monkeypatch.setattr(toolchain, "_module_download", lambda name, version, cwd, log: module)
    assert toolchain.missing(toolchain.VOLCANO) == ["vc-scheduler", "vc-controller-manager"]
    lines = []
    toolchain.ensure(with_volcano=True, log=lines.append)
    assert toolchain.missing(toolchain.VOLCANO) == []
    assert any(line.startswith("[toolchain] built volcano v1.14.1") for line in lines)
    commands = [args for args, _ in go_steps]
    assert ["go", "mod", "edit", "-replace=volcano.sh/apis=volcano.sh/apis@v1.14.0"] in commands
    assert commands.index(["go", "mod", "tidy"]) < min(i for i, c in enumerate(commands) if c[:2] == ["go", "build"])
    builds = {args[-1]: args for args in commands if args[:2] == ["go", "build"]}
    assert set(builds) == {"./cmd/scheduler", "./cmd/controller-manager"}
    ldflags = builds["./cmd/scheduler"][builds["./cmd/scheduler"].index("-ldflags") + 1]
    assert "-X volcano.sh/volcano/pkg/version.Version=v1.14.1" in ldflags
    assert "-X volcano.sh/volcano/pkg/version.GitSHA=h1:vc=" in ldflags
    tree = {cwd for _, cwd in go_steps}.pop()
    assert tree != Path(module["Dir"]) and not tree.exists(), "built in a copy, removed afterwards"
    assert sorted(p.name for p in (toolchain.volcano_manifests_dir() / "crds").iterdir()) == [
        "nodeinfo.volcano.sh_numatopologies.yaml", "scheduling.volcano.sh_podgroups.yaml"]
    (toolchain.bin_dir() / ".vc-scheduler.version").write_text("v1.10.0\n")
    assert toolchain.missing(toolchain.VOLCANO) == ["vc-scheduler"]
    toolchain.ensure(with_volcano=True, log=lambda line: None)
    assert toolchain.missing(toolchain.VOLCANO) == []
    for crd in (toolchain.volcano_manifests_dir() / "crds").iterdir():
        crd.unlink()
    assert toolchain.missing(toolchain.VOLCANO) == ["vc-scheduler", "vc-controller-manager"]


def test_a_module_without_volcanos_crds_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="recipe needs updating"):
        toolchain._copy_volcano_crds(tmp_path, tmp_path / "out")
