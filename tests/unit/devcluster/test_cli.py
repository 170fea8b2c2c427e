"""The dev-cluster command line, kwokctl's arguments, and the shipped kwok stage set (no cluster needed)."""

import argparse
import ipaddress
import random
import re
import socket
from pathlib import Path

import pytest
import yaml

from ascend_hybrid.devcluster import cli, cluster
from ascend_hybrid.devcluster import paths as cluster_files
from ascend_hybrid.devcluster.controlplane import kwokctl
from ascend_hybrid.devcluster.controlplane import ports as devports


def parse(*argv):
    parser = argparse.ArgumentParser(prog="ascend-hybrid")
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["dev-cluster", *argv])


def test_up_defaults_and_options():
    args = parse("up")
    assert (args.name, args.nodes, args.chip, args.racks, args.func) == ("ahj", 4, None, 2, cli.handle_up)
    args = parse("up", "--nodes", "256", "--chip", "A3", "--racks", "4", "--name", "big")
    assert (args.name, args.nodes, args.chip, args.racks) == ("big", 256, "A3", 4)


@pytest.mark.parametrize("argv", [("up", "--chip", "310P"), ("up", "--nodes", "0"), ("fault", "node-001"),
                                  ("fault", "node-001", "--ready", "--not-ready"), ("add-nodes",)])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        parse(*argv)


def test_every_subcommand_has_a_handler_and_a_name_option():
    for argv in (["down"], ["status"], ["kubeconfig"], ["add-nodes", "2", "--chip", "910A"],
                 ["fault", "node-002", "--chip-unhealthy", "3"], ["fault", "node-002", "--not-ready"]):
        args = parse(*argv, "--name", "other")
        assert callable(args.func) and args.name == "other"
    assert parse("build").func is cli.handle_build


def test_kubeconfig_of_a_missing_cluster_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cluster_files.CLUSTERS_ENV, str(tmp_path))
    assert cli.main(["dev-cluster", "kubeconfig", "--name", "nope"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_kubeconfig_prints_the_path_last(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cluster_files.CLUSTERS_ENV, str(tmp_path))
    paths = cluster.cluster_paths("c1")
    paths.root.mkdir()
    paths.kubeconfig.write_text("apiVersion: v1\n")
    assert cli.main(["dev-cluster", "kubeconfig", "--name", "c1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == str(paths.kubeconfig)


def test_down_of_a_missing_cluster_succeeds(tmp_path, monkeypatch):
    monkeypatch.setenv(cluster_files.CLUSTERS_ENV, str(tmp_path))
    assert cli.main(["dev-cluster", "down", "--name", "never-created"]) == 0


@pytest.mark.parametrize("name", ["", "UPPER", "-x", "a" * 41, "a/b"])
def test_cluster_names_are_checked(name):
    with pytest.raises(ValueError):
        cluster.cluster_paths(name)


def test_kwokctl_gets_the_built_binaries_the_stages_and_only_loopback_ranges(tmp_path):
    paths = cluster.ClusterPaths(name="ahj", root=tmp_path / "ahj")
    args = kwokctl.create_args(paths, Path("/bin-dir"), "127.16.32.0/20", kwok_port=21502)
    joined = " ".join(args)
    assert "--extra-args kwok-controller=cidr=127.16.32.0/20" in joined
    assert f"--config {paths.kwokctl_config}" in joined
    for flag, binary in [("--etcd-binary", "etcd"), ("--kube-apiserver-binary", "kube-apiserver"),
                         ("--kwok-controller-binary", "kwok"), ("--kube-scheduler-binary", "kube-scheduler")]:
        assert f"{flag} /bin-dir/{binary}" in joined
    assert "--runtime binary" in joined and "--enable-crds Logs" in joined
    assert f"--kubeconfig {paths.kubeconfig}" in joined
    # The one wildcard: kwok listens for the kubelet endpoints of every node's own 127.15.x.y address.
    assert "--extra-args kwok-controller=server-address=0.0.0.0:21502" in joined
    for network in re.findall(r"\d+\.\d+\.\d+\.\d+(?:/\d+)?", joined.replace("server-address=0.0.0.0:", "")):
        assert ipaddress.ip_network(network, strict=False).subnet_of(ipaddress.ip_network("127.0.0.0/8"))


def test_kwokctl_config_pins_distinct_free_ports_and_carries_the_stages():
    ports = kwokctl.pick_ports(random.Random(7))
    assert set(ports) == set(kwokctl.PORT_OPTIONS) and len(set(ports.values())) == len(ports)
    assert all(kwokctl.PORT_RANGE[0] <= p < kwokctl.PORT_RANGE[1] for p in ports.values())
    documents = list(yaml.safe_load_all(kwokctl.config_text(ports, kwokctl.stages_file().read_text())))
    assert documents[0]["kind"] == "KwokctlConfiguration"
    assert documents[0]["options"] == {**ports, "bindAddress": "127.0.0.1"}
    assert documents[1] == {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                            "options": {**kwokctl.KWOK_DEFAULTS,
                                        "podPlayStageParallelism": kwokctl.KWOK_POD_WORKERS,
                                        "nodeLeaseParallelism": kwokctl.KWOK_LEASE_WORKERS}}
    assert all(documents[1]["options"][key] for key in ("nodeLeaseParallelism", "enableDebuggingHandlers"))
    assert [d["kind"] for d in documents[2:]] == ["Stage"] * len(load_stages())


def load_stages():
    return list(yaml.safe_load_all(kwokctl.stages_file().read_text()))


def test_the_stage_set_covers_the_whole_node_and_pod_lifecycle():
    stages = load_stages()
    assert all(s["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and s["kind"] == "Stage" for s in stages)
    by_kind = {}
    for stage in stages:
        by_kind.setdefault(stage["spec"]["resourceRef"]["kind"], set()).add(stage["metadata"]["name"])
    assert by_kind["Node"] == {"ahj-node-initialize", "ahj-node-heartbeat-with-lease", "ahj-node-not-ready"}
    assert by_kind["Pod"] == {"ahj-pod-running", "ahj-pod-succeed", "ahj-pod-fail", "ahj-pod-terminate",
                              "ahj-pod-delete", "ahj-pod-process-address"}


def test_a_deleted_pod_held_by_a_finalizer_is_terminated_first_as_a_kubelet_does():
    """Kueue removes its finalizer only from terminated pods and ahj-pod-delete waits for the finalizers: a bound
    pod being deleted turns Failed first (ahj-pod-terminate); the two stages never match the same pod."""
    stages = {s["metadata"]["name"]: s for s in load_stages()}
    terminate = {e["key"]: e for e in stages["ahj-pod-terminate"]["spec"]["selector"]["matchExpressions"]}
    delete = {e["key"]: e for e in stages["ahj-pod-delete"]["spec"]["selector"]["matchExpressions"]}
    assert terminate[".metadata.deletionTimestamp"]["operator"] == delete[".metadata.deletionTimestamp"]["operator"] == "Exists"
    assert (terminate[".metadata.finalizers"]["operator"], delete[".metadata.finalizers"]["operator"]) == (
        "Exists", "DoesNotExist")
    assert terminate[".status.phase"] == {"key": ".status.phase", "operator": "In", "values": ["Pending", "Running"]}
    assert terminate[".spec.nodeName"]["operator"] == "Exists", "unbound pods are the pod GC's, as in a cluster"
    template = yaml.safe_load(stages["ahj-pod-terminate"]["spec"]["next"]["statusTemplate"]
                              .replace("{{ $now := Now }}", "").replace("{{ $now | Quote }}", '"now"')
                              .replace("{{ range .spec.containers }}", "").replace("{{ end }}", "")
                              .replace("{{ .image | Quote }}", '"i"').replace("{{ .name | Quote }}", '"c"'))
    assert template["phase"] == "Failed"
    assert template["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143


def test_pods_requesting_npus_wait_for_the_kubelets_allocation_and_outcomes_read_the_sim_annotations():
    """Containers start once the kubelet allocated the chips, not once the device plugin annotated them (it does so
    on its own period, after the pod runs)."""
    stages = {s["metadata"]["name"]: s for s in load_stages()}
    for stage in ("ahj-pod-running", "ahj-pod-process-address"):
        keys = " ".join(e["key"] for e in stages[stage]["spec"]["selector"]["matchExpressions"])
        assert "sim.hybrid.ascend.dev/kubelet-devices" in keys
        assert "ascend.kubectl.kubernetes.io/ascend-910-configuration" not in keys
    for name, outcome in (("ahj-pod-succeed", "succeed"), ("ahj-pod-fail", "fail")):
        spec = stages[name]["spec"]
        assert {"key": '.metadata.annotations["sim.hybrid.ascend.dev/outcome"]', "operator": "In",
                "values": [outcome]} in spec["selector"]["matchExpressions"]
        assert "sim.hybrid.ascend.dev/after-seconds" in spec["delay"]["durationFrom"]["expressionFrom"]
    assert "sim.hybrid.ascend.dev/exit-code" in stages["ahj-pod-fail"]["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in stages["ahj-pod-fail"]["spec"]["next"]["statusTemplate"]


def test_each_cluster_gets_its_own_slice_of_pod_addresses(tmp_path, monkeypatch):
    from ascend_hybrid.devcluster import paths as paths_module

    monkeypatch.setenv(paths_module.CLUSTERS_ENV, str(tmp_path))
    assert paths_module.free_pod_cidr([]) == "127.16.0.0/20"
    for name, cidr in (("one", "127.16.0.0/20"), ("two", "127.16.16.0/20")):
        place = paths_module.cluster_paths(name)
        place.root.mkdir(parents=True)
        paths_module.save_settings(place, paths_module.Settings("910B", 2, 2, cidr))
    assert paths_module.other_pod_cidrs("three") == ["127.16.0.0/20", "127.16.16.0/20"]
    assert paths_module.free_pod_cidr(paths_module.other_pod_cidrs("three")) == "127.16.32.0/20"
    with pytest.raises(RuntimeError):
        paths_module.free_pod_cidr(["127.16.0.0/16"])  # a cluster of the old layout holds the whole range


def test_server_ports_come_from_below_the_ephemeral_range_and_skip_a_taken_one():
    low, high = (int(n) for n in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert devports.SERVER_RANGE[1] <= low and devports.CONTROL_PLANE_RANGE[1] <= low
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        assert not devports.port_is_free(taken, "127.0.0.1") and not devports.port_is_free(taken)
        with pytest.raises(RuntimeError, match=f"no 1 free ports in {taken}-{taken}"):
            devports.pick_free_ports(1, (taken, taken + 1), "127.0.0.1")


def test_picking_more_ports_than_a_range_holds_is_an_error_not_a_hang():
    with pytest.raises(RuntimeError, match="no 3 free ports in 15000-15001"):
        devports.pick_free_ports(3, (15000, 15002), "127.0.0.1")


def test_a_slow_node_or_link_is_asked_for_with_its_factor_and_a_bad_factor_named(monkeypatch, capsys):
    args = parse("fault", "node-003", "--slow", "1.5")
    assert (args.slow, args.slow_link, args.clear) == ("1.5", None, False)
    assert parse("fault", "node-003", "--slow-link", "node-004", "4").slow_link == ["node-004", "4"]
    assert parse("fault", "node-003", "--clear").clear
    with pytest.raises(SystemExit):
        parse("fault", "node-003", "--slow", "2", "--clear")
    monkeypatch.setattr(cli.cluster, "require_running", lambda name: None)
    monkeypatch.setattr(cli.cluster, "core_api", lambda paths: None)
    assert cli.handle_fault(parse("fault", "node-003", "--slow", "0.5")) == 1
    assert "slowness factor 0.5: must be between 1 and 1000 (2 = twice as slow)" in capsys.readouterr().err
