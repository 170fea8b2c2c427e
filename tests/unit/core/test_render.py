"""Child manifests (design §6, §8): valid Kubernetes 1.36 objects, deterministic, named and wired as specified."""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import json

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_hybrid.contracts import names
from ascend_hybrid.gang import render
from ascend_hybrid.gang.ranktable import INITIALIZING, JOB_CONFIG_ROOM
from ascend_hybrid.spec import rules
from support.builders import JobBuilder, PodBuilder
from support.strategies import valid_specs

K8S = "1.36.0"
UID = "2f6a1c3e-0000-4000-8000-000000000001"
SCHED_IP = "10.96.0.42"
RANK_VARIABLES = ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_LOCAL_WORKER", "MS_NODE_RANK",
                  "RANK_TABLE_FILE", "RANK_SIZE", "RANK_START")


def load(path) -> dict:
    return yaml.safe_load(path.read_text())


def resolved_of(spec: dict, name: str = "job") -> rules.ResolvedJob:
    return rules.parse({"metadata": {"name": name}, "spec": spec})


def children_of(resolved, attempt: int = 1, table=None) -> list[dict]:
    nodes = tuple(f"node-{i:02d}" for i in range(resolved.pod_count))
    return render.children(resolved, "team-a", UID, attempt, nodes, SCHED_IP, table)


def env_of(pod: dict) -> dict[str, dict]:
    [container] = pod["spec"]["containers"]
    names = [entry["name"] for entry in container["env"]]
    assert len(names) == len(set(names)), f"duplicate env names {names}"
    return {entry["name"]: entry for entry in container["env"]}


def values_of(pod: dict) -> dict[str, str]:
    return {name: entry["value"] for name, entry in env_of(pod).items() if "value" in entry}


@pytest.fixture(scope="module")
def seed(examples):
    return rules.parse(load(examples / "seed-moe-128.yaml"))


@pytest.fixture(scope="module")
def seed_children(seed):
    return children_of(seed, attempt=3)


def test_every_child_is_a_valid_kubernetes_object(seed_children, examples):
    small = rules.parse(load(examples / "job.yaml"))
    objects = seed_children + children_of(small)
    assert [o["kind"] for o in seed_children] == ["Service", "Service", "ConfigMap"] + ["Pod"] * 16
    for obj in objects:
        kubernetes_validate.validate(copy.deepcopy(obj), K8S, strict=True)


def test_validation_would_catch_a_broken_child(seed_children):
    broken = copy.deepcopy(seed_children[-1])
    broken["spec"]["containers"][0]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S, strict=True)


def test_output_is_deterministic(seed):
    first, second = children_of(seed, 3), children_of(seed, 3)
    assert first == second
    assert yaml.safe_dump_all(first, sort_keys=False) == yaml.safe_dump_all(second, sort_keys=False)


def test_names_per_design(seed_children):
    names = [(o["kind"], o["metadata"]["name"]) for o in seed_children]
    assert names[:3] == [("Service", "seed-moe-128-sched"), ("Service", "seed-moe-128"),
                         ("ConfigMap", "rings-config-seed-moe-128")]
    assert [n for _, n in names[3:]] == [f"seed-moe-128-a3-{i}" for i in range(16)]
    for obj in seed_children:
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"]["hybrid.ascend.dev/job"] == "seed-moe-128"
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "name": "seed-moe-128",
            "uid": UID, "controller": True, "blockOwnerDeletion": True}]


def test_services(seed_children):
    sched, headless = seed_children[:2]
    assert sched["spec"]["type"] == "ClusterIP" and "clusterIP" not in sched["spec"]
    assert sched["spec"]["selector"] == {"hybrid.ascend.dev/job": "seed-moe-128", "hybrid.ascend.dev/pod-index": "0"}
    assert sched["spec"]["ports"] == [{"name": "ms-sched", "protocol": "TCP", "port": 2222, "targetPort": 2222}]
    assert headless["spec"]["clusterIP"] == "None"
    assert "selector" not in headless["spec"]  # its endpoints are the rank table's pods (dns_slices)
    pod0 = seed_children[3]
    assert all(pod0["metadata"]["labels"][k] == v for k, v in sched["spec"]["selector"].items())
    assert pod0["spec"]["subdomain"] == headless["metadata"]["name"]


def test_config_maps(seed, seed_children):
    table_map = seed_children[2]
    assert json.loads(table_map["data"]["hccl.json"]) == INITIALIZING
    job = json.loads(table_map["data"]["job.json"])
    assert job["parallelism"] == seed.degrees
    assert job["worldSize"] == 128 and job["npu"] == {"chip": "910B", "perPod": 8}
    assert job["model"] == seed.model
    assert job["training"]["globalBatchSize"] == 512 and job["training"]["steps"] == 10000
    table = {"status": "completed", "version": "1.2", "server_count": "0", "server_list": []}
    assert table_map["data"]["version"] == "0"  # the counter of tables written: none yet
    job_json = render.job_config_text(seed)
    completed = render.rank_table_config_map("seed-moe-128", "team-a", UID, job_json, table, revision=3)
    assert json.loads(completed["data"]["hccl.json"]) == table and completed["data"]["version"] == "3"
    assert completed["data"]["job.json"] == job_json, "every write of the table carries job.json"
    assert children_of(seed, 3, table)[2] == render.rank_table_config_map("seed-moe-128", "team-a", UID, job_json,
                                                                         table)


def test_job_json_keeps_within_its_room_beside_the_largest_rank_table():
    """job.json shares rings-config-<job> with a table that may take all but JOB_CONFIG_ROOM of the 1 MiB."""
    widest = resolved_of({"parallelism": {"pipeline": 1024, "pipelineLayers": [10**6] * 1024},
                          "model": {"layers": 10**6 * 1024}}, name="j" * 50)
    text = render.job_config_text(widest)
    assert len(text.encode()) <= JOB_CONFIG_ROOM and json.loads(text) == render.job_config(widest)
    manifest = render.rank_table_config_map(widest.name, "ns", UID, text)
    assert manifest["data"]["job.json"] == text
    with pytest.raises(ValueError, match="job.json is .* bytes"):
        render.rank_table_config_map(widest.name, "ns", UID, " " * (JOB_CONFIG_ROOM + 1))


def test_pod_shape(seed, seed_children):
    pods = seed_children[3:]
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"] == {"hybrid.ascend.dev/job": "seed-moe-128", "hybrid.ascend.dev/attempt": "3",
                                  "hybrid.ascend.dev/pod-index": str(index),
                                  "app.kubernetes.io/managed-by": "ascend-hybrid-operator"}
        assert meta["annotations"] == {"hccl/rankIndex": str(index)}
        assert "schedulingGates" not in spec  # the direct path: created schedulable, pinned (design §5)
        assert spec["nodeName"] == f"node-{index:02d}"  # and bound there at creation: the scheduler not involved
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                "values": [f"node-{index:02d}"]}]}]
        assert spec["restartPolicy"] == "Never"
        [container] = spec["containers"]
        assert container["name"] == "ascend"
        # the trainer's last word (one JSON line) at the default path; a container that wrote none and failed
        # leaves its log's tail there instead, so the operator always has something to read
        assert container["terminationMessagePath"] == "/dev/termination-log"
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert container["resources"]["limits"] == {"huawei.com/Ascend910": "8"}
        assert container["resources"]["requests"] == {"huawei.com/Ascend910": "8"}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes[mounts["/user/serverid/devindex/config"]]["configMap"]["name"] == "rings-config-seed-moe-128"
        # job.json alone from the same ConfigMap: the trainer's directory holds no rank table
        assert volumes[mounts["/etc/ascend-hybrid"]]["configMap"] == {
            "name": "rings-config-seed-moe-128", "items": [{"key": "job.json", "path": "job.json"}]}
        assert "/checkpoints" not in mounts


def test_env_of_design_section_8(seed, seed_children):
    for index, pod in enumerate(seed_children[3:]):
        env = env_of(pod)
        values = values_of(pod)
        assert values["MS_ROLE"] == "MS_WORKER"
        assert values["MS_SCHED_HOST"] == SCHED_IP
        assert values["MS_SCHED_PORT"] == "2222"
        assert values["MS_WORKER_NUM"] == values["RANK_SIZE"] == "128"
        assert values["MS_LOCAL_WORKER"] == "8"
        assert values["MS_NODE_RANK"] == str(index)
        assert values["RANK_START"] == str(index * 8)
        assert values["RANK_TABLE_FILE"] == "/user/serverid/devindex/config/hccl.json"
        assert values["HCCL_CONNECT_TIMEOUT"] == "600" and values["HCCL_EXEC_TIMEOUT"] == "1800"
        assert values["HCCL_WHITELIST_DISABLE"] == "1"
        assert "HCCL_SOCKET_IFNAME" not in env and "HCCL_IF_IP" not in env
        assert json.loads(values["AHJ_PARALLEL"]) == seed.degrees
        assert values["AHJ_JOB_CONFIG"] == "/etc/ascend-hybrid/job.json"
        assert values["AHJ_TERMINATION_LOG"] == "/dev/termination-log"
        assert values["AHJ_LAUNCHER_CHANNEL"] == f"{seed.name}-recovery"
        assert "AHJ_LAUNCHER_CHANNEL_METADATA" not in values  # the operator makes the channel: launchers never do
        assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert "ASCEND_VISIBLE_DEVICES" not in env
        for entry in env.values():
            assert set(entry) in ({"name", "value"}, {"name", "valueFrom"}) and isinstance(entry.get("value", ""), str)


def full_spec() -> dict:
    return {
        "parallelism": {"data": 4, "tensor": 2},
        "npu": {"perPod": 4},
        "training": {"checkpoint": {"claimName": "ckpt-pvc", "everySteps": 50}},
        "hccl": {"socketIfname": "eth1", "whitelistDisable": False,
                 "env": {"HCCL_EXEC_TIMEOUT": "900", "HCCL_IF_IP": "127.0.0.1", "RANK_START": "99"}},
        "scheduling": {"schedulerName": "gang-scheduler", "queue": "research"},
        "template": {
            "metadata": {"labels": {"team": "nlp", "hybrid.ascend.dev/job": "spoofed"},
                         # (a template's hccl/rankIndex is refused: rule_cases "annotation-reserved-key")
                         "annotations": {"owner": "alice"}},
            "image": "registry.example/trainer:1", "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-m", "train"], "args": ["--fast"],
            "env": [{"name": "HCCL_CONNECT_TIMEOUT", "value": "30"}, {"name": "EXTRA", "value": "1"},
                    {"name": "POD_IP", "value": "127.0.0.9"},
                    {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
                   + [{"name": name, "value": "hijacked"} for name in RANK_VARIABLES],
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "32Gi"}},
            "volumes": [{"name": "data", "emptyDir": {}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "nodeSelector": {"pool": "npu"},
            "tolerations": [{"key": "npu", "operator": "Exists", "effect": "NoSchedule"}],
            "serviceAccountName": "trainer", "priorityClassName": "high", "imagePullSecrets": ["registry"],
        },
    }


@pytest.fixture(scope="module")
def full_pods():
    resolved = resolved_of(full_spec())
    return resolved, children_of(resolved, attempt=2)[3:]


def test_full_template_pods_are_valid(full_pods):
    for pod in full_pods[1]:
        kubernetes_validate.validate(copy.deepcopy(pod), K8S, strict=True)


def test_user_env_wins_except_rank_variables(full_pods):
    _, pods = full_pods
    for index, pod in enumerate(pods):
        env, values = env_of(pod), values_of(pod)
        assert values["HCCL_CONNECT_TIMEOUT"] == "30", "user env overrides a default"
        assert values["POD_IP"] == "127.0.0.9" and "valueFrom" not in env["POD_IP"]
        assert values["EXTRA"] == "1"
        assert env["SECRET"]["valueFrom"] == {"secretKeyRef": {"name": "s", "key": "k"}}
        assert values["RANK_START"] == str(index * 4), "rank variables are the operator's"
        assert values["MS_NODE_RANK"] == str(index)
        for name in RANK_VARIABLES:
            assert values[name] != "hijacked", name
        assert values["HCCL_EXEC_TIMEOUT"] == "900", "hccl.env overrides a default"
        assert values["HCCL_IF_IP"] == "127.0.0.1"
        assert values["HCCL_SOCKET_IFNAME"] == "eth1"
        assert values["HCCL_WHITELIST_DISABLE"] == "0"
        assert values["MS_WORKER_NUM"] == "8" and values["MS_LOCAL_WORKER"] == "4"


def test_template_is_applied(full_pods):
    _, pods = full_pods
    for index, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["labels"]["team"] == "nlp"
        assert meta["labels"]["hybrid.ascend.dev/job"] == "job", "the operator's labels win"
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "research"
        assert meta["labels"]["kueue.x-k8s.io/pod-group-name"] == "job-a2", "one Kueue pod group per attempt"
        assert "hybrid.ascend.dev/queue" not in meta["labels"], "the label no scheduler read is gone"
        assert meta["annotations"] == {"owner": "alice", "hccl/rankIndex": str(index),
                                       "kueue.x-k8s.io/pod-group-total-count": "2",
                                       "kueue.x-k8s.io/retriable-in-group": "false"}
        assert spec["schedulerName"] == "gang-scheduler"
        assert spec["serviceAccountName"] == "trainer" and spec["priorityClassName"] == "high"
        assert spec["imagePullSecrets"] == [{"name": "registry"}]
        assert spec["nodeSelector"] == {"pool": "npu"}
        assert spec["tolerations"] == [{"key": "npu", "operator": "Exists", "effect": "NoSchedule"}]
        [container] = spec["containers"]
        assert container["image"] == "registry.example/trainer:1"
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert container["command"] == ["python", "-m", "train"] and container["args"] == ["--fast"]
        assert container["resources"] == {
            "requests": {"cpu": "4", "memory": "16Gi", "huawei.com/Ascend910": "4"},
            "limits": {"memory": "32Gi", "huawei.com/Ascend910": "4"}}
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes[mounts["/checkpoints"]["name"]]["persistentVolumeClaim"] == {"claimName": "ckpt-pvc"}
        assert mounts["/data"]["name"] == "data" and volumes["data"] == {"name": "data", "emptyDir": {}}


def test_defaults_leave_optional_fields_out(examples):
    pod = children_of(rules.parse(load(examples / "job.yaml")))[-1]
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    for key in ("schedulerName", "priorityClassName", "imagePullSecrets"):
        assert key not in spec
    # no ServiceAccount named: the job's own, which no other pod of the namespace runs as
    assert spec["serviceAccountName"] == f"{pod['metadata']['ownerReferences'][0]['name']}-launcher"
    for key in ("command", "args", "imagePullPolicy"):
        assert key not in container
    assert container["image"] == "ascend-hybrid/trainer:0.1.0"
    assert not [key for key in {**pod["metadata"]["labels"], **pod["metadata"]["annotations"]}
                if key.startswith("kueue.x-k8s.io/")], "without a queue nothing of Kueue"


@pytest.mark.parametrize("name, namespace", [("yes", "null"), ("on", "true"), ("n0", "0123")])
def test_yaml_ambiguous_names_stay_strings(name, namespace):
    resolved = resolved_of({"parallelism": {"data": 16}}, name=name)  # two pods: the Services too
    objects = render.children(resolved, namespace, UID, 1, ("off", "off"), SCHED_IP)
    for obj in objects:
        assert obj["metadata"]["namespace"] == namespace
        assert isinstance(obj["metadata"]["name"], str) and obj["metadata"]["name"].startswith(
            ("rings-config-", name))
        kubernetes_validate.validate(copy.deepcopy(obj), K8S, strict=True)
    assert objects[1]["metadata"]["name"] == name
    assert objects[-1]["spec"]["subdomain"] == name
    assert objects[-1]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["off"]


label_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
# an image must be a reference the kubelet can parse (rules.py refuses anything else): tags may be any case
image_text = st.from_regex(r"[a-z0-9]{1,8}(/[a-z0-9]{1,8})?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,8})?", fullmatch=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(annotations=st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), label_text, max_size=3),
       env_value=label_text, image=image_text)
def test_arbitrary_text_survives_rendering(annotations, env_value, image):
    spec = {"parallelism": {"data": 2}, "npu": {"perPod": 2},
            "template": {"metadata": {"annotations": annotations}, "image": image,
                         "env": [{"name": "TEXT", "value": env_value}]}}
    pod = render.pod(resolved_of(spec), "ns", UID, 1, 0, "node-0", SCHED_IP)
    assert pod["metadata"]["annotations"] == {**annotations, "hccl/rankIndex": "0"}
    assert values_of(pod)["TEXT"] == env_value
    assert pod["spec"]["containers"][0]["image"] == image
    json.dumps(pod).encode("utf-8")  # what the API client sends


def test_every_pod_of_random_valid_jobs_validates():
    @settings(max_examples=12, deadline=None)
    @given(data=st.data())
    def check(data):
        resolved = resolved_of(data.draw(valid_specs()))
        objects = children_of(resolved)
        others = 3 if render.needs_services(resolved) else 1  # the Services, the ConfigMap
        assert len(objects) == others + resolved.pod_count
        for index, pod in enumerate(objects[others:]):
            assert values_of(pod)["RANK_START"] == str(index * resolved.per_pod)
            assert pod["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == str(
                resolved.per_pod)
            assert ("subdomain" in pod["spec"]) == render.needs_services(resolved)
        for obj in objects[:others + 1] + objects[-1:]:
            kubernetes_validate.validate(copy.deepcopy(obj), K8S, strict=True)

    check()


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",))))
def test_template_json_reads_back_unchanged_with_libyaml(text):
    """What the templates embed must survive the fast YAML loader: line breaks escaped, astral characters literal,
    a literal backslash before `ud83d` left alone."""
    import yaml

    from ascend_hybrid.gang.render import _json_for_yaml

    assert yaml.load(_json_for_yaml(text), Loader=yaml.CSafeLoader) == text
    assert yaml.load(_json_for_yaml("\\" + text), Loader=yaml.CSafeLoader) == "\\" + text


def test_a_queued_pod_is_created_unpinned_with_its_chip_requirement_only():
    """Kueue groups pods by the shape of their spec (affinity included) and refuses more than 8 shapes: a queued
    gang's pods differ in nothing Kueue compares until they are pinned after admission (queue_steps.py)."""
    resolved = resolved_of({"parallelism": {"data": 12, "tensor": 8}, "scheduling": {"queue": "team-a"}})
    chip = [{"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}]
    pods = [render.pod(resolved, "team-a", UID, 3, index, None, SCHED_IP, chip) for index in range(12)]
    for pod in pods:
        kubernetes_validate.validate(copy.deepcopy(pod), K8S, strict=True)
        assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [{"matchExpressions": chip}]}
        assert pod["spec"]["schedulingGates"] == [{"name": "hybrid.ascend.dev/gang"}]
        assert "nodeName" not in pod["spec"]
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "job-a3"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "12"
    shapes = {json.dumps({key: pod["spec"].get(key) for key in ("affinity", "nodeSelector", "tolerations")}
                         | {"resources": [c["resources"] for c in pod["spec"]["containers"]],
                            "ports": [c["ports"] for c in pod["spec"]["containers"]]}, sort_keys=True)
              for pod in pods}
    assert len(shapes) == 1, "12 pods, one role for Kueue"
    unlabelled = render.pod(resolved, "team-a", UID, 3, 0, None, SCHED_IP)
    assert "affinity" not in unlabelled["spec"]


def test_network_policy_admits_only_the_jobs_pods_and_the_metrics_peers():
    rendering = render
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ascend-hybrid-operator"}}}
    policy = rendering.network_policy("demo", "team", "uid-1", [operator])
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["name"] == "demo-network"
    kubernetes_validate.validate(copy.deepcopy(policy), K8S, strict=True)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {names.JOB_LABEL: "demo"}} and spec["policyTypes"] == ["Ingress"]
    peers, metrics = spec["ingress"]
    assert peers["from"] == [{"podSelector": {"matchLabels": {names.JOB_LABEL: "demo"}}}]

    def admitted(rule, port):
        return any(p["port"] <= port <= p.get("endPort", p["port"]) for p in rule["ports"])
    for port in (names.SCHED_PORT, 60000, 60015, 8118):  # scheduler, HCCL host ports, MindSpore worker ports
        assert admitted(peers, port) and not admitted(metrics, port)
    assert not admitted(peers, names.METRICS_PORT) and admitted(metrics, names.METRICS_PORT)
    assert metrics["from"] == [operator]
    assert [r for r in rendering.network_policy("demo", "team", "u", [])["spec"]["ingress"]] == [peers]


def test_a_gangs_pods_made_from_one_render_are_each_the_pod_render_would_make():
    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data):
        spec = data.draw(valid_specs())
        if data.draw(st.booleans()):
            spec["template"] = full_spec()["template"]
        resolved = resolved_of(spec)
        indices = data.draw(st.lists(st.integers(0, resolved.pod_count - 1), min_size=1, max_size=6, unique=True))
        pinned = data.draw(st.booleans())
        placed = [(index, f"node-{index * 7 % 5:02d}" if pinned else None) for index in indices]
        requirements = [] if pinned else [{"key": "accelerator-type", "operator": "In", "values": ["module-910b-8"]}]
        made = render.gang_pods(resolved, "team-a", UID, 2, placed, SCHED_IP, requirements)
        assert made == [render.pod(resolved, "team-a", UID, 2, index, node, SCHED_IP, requirements)
                        for index, node in placed]

    check()
    assert render.gang_pods(resolved_of(full_spec()), "team-a", UID, 1, [], SCHED_IP) == []


def test_a_job_of_one_pod_has_no_services_and_its_scheduler_is_the_pods_own_ip():
    """Two writes less per small job. Its MindSpore scheduler runs in its one pod (launcher.scheduler_host
    uses POD_IP there anyway), so MS_SCHED_HOST is the pod's IP and no Service or DNS name is made."""
    alone = resolved_of({"parallelism": {"data": 8}})
    objects = render.children(alone, "ns", UID, 1, ("node-0",), None)
    assert [obj["kind"] for obj in objects] == ["ConfigMap", "Pod"]
    pod = objects[-1]
    assert "subdomain" not in pod["spec"] and env_of(pod)["MS_SCHED_HOST"] == {
        "name": "MS_SCHED_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    kubernetes_validate.validate(copy.deepcopy(pod), K8S, strict=True)
    elastic = resolved_of({"parallelism": {"data": 8}, "elastic": {"minData": 4}})
    assert render.needs_services(elastic), "an elastic job may grow beyond its one pod"
    assert render.needs_services(resolved_of({"parallelism": {"data": 16}}))


def test_a_queued_pod_placed_after_admission_is_pinned_but_left_to_the_scheduler():
    """A queued gang's pods carry Kueue's gate, and the apiserver refuses a nodeName beside a gate: pinned by the
    affinity only, the scheduler binds them once released. The direct path binds at creation."""
    queued = resolved_of({"parallelism": {"data": 2, "tensor": 8}, "scheduling": {"queue": "team-a"}})
    direct = resolved_of({"parallelism": {"data": 2, "tensor": 8}})
    for resolved, bound in ((queued, [None, None]), (direct, ["node-a", "node-b"])):
        pods = render.gang_pods(resolved, "team-a", UID, 1, [(0, "node-a"), (1, "node-b")], SCHED_IP)
        assert [pod["spec"].get("nodeName") for pod in pods] == bound
        assert pods == [render.pod(resolved, "team-a", UID, 1, index, node, SCHED_IP)
                        for index, node in ((0, "node-a"), (1, "node-b"))]
        for pod in pods:
            kubernetes_validate.validate(copy.deepcopy(pod), K8S, strict=True)


def _endpoint_pods(count: int, first_ip: str = "10.1.0.1") -> list[dict]:
    start = ipaddress.ip_address(first_ip)
    return [PodBuilder("seed-moe-128", index, namespace="team-a").uid(f"uid-{index}")
            .running(node=f"node-{index}", pod_ip=str(start + index)).build() for index in range(count)]


def test_the_headless_services_slices_list_the_table_pods_and_are_valid_objects():
    pods = _endpoint_pods(3)[::-1] + [PodBuilder("seed-moe-128", 3).running(pod_ip="127.16.0.4").build()]
    (dns,) = render.dns_slices("seed-moe-128", "team-a", UID, render.pod_endpoints(pods), pod_count=4)
    kubernetes_validate.validate(copy.deepcopy(dns), K8S, strict=True)
    assert dns["metadata"]["name"] == "seed-moe-128-dns-0" and dns["addressType"] == "IPv4"
    assert dns["metadata"]["labels"]["kubernetes.io/service-name"] == "seed-moe-128"
    assert dns["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != "endpointslice-controller.k8s.io"
    assert dns["ports"] == [{"name": "metrics", "protocol": "TCP", "port": 9400}]
    # in name order; the loopback pod (a real trainer of the simulated cluster) has no record: the apiserver
    # refuses loopback addresses in EndpointSlices
    assert [(e["hostname"], e["addresses"], e["nodeName"], e["targetRef"]["uid"]) for e in dns["endpoints"]] == [
        (f"seed-moe-128-a1-{i}", [f"10.1.0.{i + 1}"], f"node-{i}", f"uid-{i}") for i in range(3)]
    assert all(e["conditions"] == {"ready": True} for e in dns["endpoints"])


def test_a_gang_beyond_one_slices_limit_fills_several_and_an_empty_table_empties_them():
    endpoints = render.pod_endpoints(_endpoint_pods(2_100))
    slices = render.dns_slices("big", "team-a", UID, endpoints, pod_count=2_100)
    assert [s["metadata"]["name"] for s in slices] == ["big-dns-0", "big-dns-1", "big-dns-2"]
    assert [len(s["endpoints"]) for s in slices] == [1000, 1000, 100]
    emptied = render.dns_slices("big", "team-a", UID, (), pod_count=2_100)
    assert [(s["metadata"]["name"], s["endpoints"]) for s in emptied] == [(f"big-dns-{i}", []) for i in range(3)]


def test_ipv6_pods_get_an_ipv6_slice():
    (dns,) = render.dns_slices("v6", "team-a", UID, render.pod_endpoints(_endpoint_pods(2, "fd00::1")), 2)
    assert dns["addressType"] == "IPv6" and dns["endpoints"][1]["addresses"] == ["fd00::2"]


def test_a_shrunk_elastic_job_keeps_the_slices_its_whole_gang_fills():
    """Shrunk from 2 048 pods to 512, the job writes three slices, two of them empty, so that no slice keeps the
    records of pods the shrink let go; a job that is not elastic counts its own pods."""
    whole = rules.parse(JobBuilder("big").parallelism(data=2048, tensor=8).per_pod(8).section("elastic", minData=256).build())
    shrunk = dataclasses.replace(whole, data=512)
    assert (render.most_pods(whole), render.most_pods(shrunk)) == (2048, 2048)
    slices = render.dns_slices("big", "team-a", UID, render.pod_endpoints(_endpoint_pods(512)), render.most_pods(shrunk))
    assert [len(s["endpoints"]) for s in slices] == [512, 0, 0]
    fixed = rules.parse(JobBuilder("small").parallelism(data=4, tensor=8).per_pod(8).build())
    assert render.most_pods(dataclasses.replace(fixed, data=2)) == 2
