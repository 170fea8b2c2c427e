"""The planner in the operator, on the real apiserver + scheduler + kwok: `parallelism: auto` planned and run, the
auto rules at admission, and a manual strategy predicted to run out of memory (warned, or refused)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from ascend_hybrid.contracts import names
from support.operator_harness import Jobs, OperatorProcess, install_crd, job_manifest, wait_for

pytestmark = pytest.mark.integration

AUTO = {"apiVersion": "hybrid.ascend.dev/v1alpha1", "kind": "AscendHybridJob", "metadata": {"name": "auto-gpt"},
        "spec": {"parallelism": {"auto": True, "world": 16}, "model": {"preset": "gpt-1b"},
                 "training": {"steps": 10, "globalBatchSize": 64}}}


@pytest.fixture
def jobs(dev_cluster, namespace, tmp_path):
    install_crd(dev_cluster)
    operator = OperatorProcess(str(dev_cluster.kubeconfig), tmp_path / "operator.log").start()
    handle = Jobs(dev_cluster.api, namespace, operator)
    yield handle
    handle.delete_all()
    operator.stop()


def test_an_auto_job_runs_the_strategy_the_planner_chose(jobs):
    jobs.create(AUTO)
    status = jobs.wait_running("auto-gpt", timeout=90)
    plan = status["plan"]
    degrees = plan["parallelism"]
    assert plan["source"] == "planned" and plan["fits"] and plan["considered"] > 1
    assert degrees["data"] * degrees["tensor"] * degrees["pipeline"] == 16 == status["worldSize"]
    assert {key: status["parallelism"][key] for key in ("data", "tensor", "pipeline")} == {
        key: degrees[key] for key in ("data", "tensor", "pipeline")}
    pods = jobs.pods("auto-gpt", attempt=status["attempt"])
    assert len(pods) == 2
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert json.loads(env["AHJ_PARALLEL"])["tensor"] == degrees["tensor"] and env["MS_WORKER_NUM"] == "16"
    job_json = json.loads(jobs.core.read_namespaced_config_map(names.rank_table_config_map("auto-gpt"),
                                                               jobs.namespace).data["job.json"])
    assert job_json["parallelism"]["pipeline"] == degrees["pipeline"]
    assert job_json["training"]["recompute"] == plan["recompute"]
    ranks = [device["rank_id"] for server in jobs.rank_table("auto-gpt")["server_list"] for device in server["device"]]
    assert ranks == [str(rank) for rank in range(16)]
    assert any(reason == "StrategyChosen" for _, reason, _ in jobs.events("auto-gpt"))


def test_an_auto_spec_with_a_degree_set_is_refused_at_admission_naming_the_field(jobs):
    bad = json.loads(json.dumps(AUTO))
    bad["metadata"]["name"] = "auto-bad"
    bad["spec"]["parallelism"]["pipeline"] = 2
    with pytest.raises(client.ApiException) as refused:
        jobs.create(bad)
    assert refused.value.status == 422
    assert "spec.parallelism.pipeline: must not be set when spec.parallelism.auto is true" in refused.value.body


def out_of_memory(name: str, **extra) -> dict:
    """gpt-1b, 8 samples of 4096 tokens per DP rank in one micro-batch: ~318 GiB predicted on a 57.6 GiB 910B."""
    return job_manifest(name, data=8, tensor=1, per_pod=8, model={"preset": "gpt-1b"},
                        training={"globalBatchSize": 64, "seqLength": 4096}, **extra)


def test_a_manual_job_predicted_out_of_memory_warns_with_the_alternative_and_runs(jobs):
    jobs.create(out_of_memory("oom-warn"))
    status = jobs.wait_running("oom-warn", timeout=90)
    fits = next(c for c in status["conditions"] if c["type"] == "StrategyFits")
    assert (fits["status"], fits["reason"]) == ("False", "PredictedOutOfMemory")
    assert status["plan"]["alternative"]["summary"] in fits["message"]
    assert ("Warning", "PredictedOutOfMemory") in {(kind, reason) for kind, reason, _ in jobs.events("oom-warn")}


def test_refuse_unfit_strategy_fails_the_job_before_any_pod_exists(jobs):
    jobs.create(out_of_memory("oom-refused", runPolicy={"refuseUnfitStrategy": True}))
    status = jobs.wait_phase("oom-refused", "Failed", timeout=60)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PredictedOutOfMemory" and "refuseUnfitStrategy" in failed["message"]
    wait_for(lambda: jobs.events("oom-refused"), 10, "the job's events")
    assert jobs.pods("oom-refused") == [] and "placement" not in status


def test_plan_cluster_plans_for_the_free_npus_the_gang_placer_can_use(dev_cluster, cli_path, examples):
    import subprocess

    result = subprocess.run([str(cli_path), "plan", "-f", str(examples / "job.yaml"), "--cluster", "--kubeconfig",
                             str(dev_cluster.kubeconfig), "-o", "json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    cluster = document["cluster"]
    assert document["world"] == 8 and cluster["world"] >= 8 and cluster["world"] % 8 == 0  # the job's own world
    assert "free 910B NPUs" in cluster["capacity"] and cluster["placeableNow"][:1] == [1]
    for candidate in document["candidates"]:
        degrees = candidate["parallelism"]
        assert degrees["data"] * degrees["tensor"] * degrees["pipeline"] == 8
    too_big = subprocess.run([str(cli_path), "plan", "-f", str(examples / "job.yaml"), "--cluster", "--world",
                              str(cluster["world"] + 8), "--kubeconfig", str(dev_cluster.kubeconfig)],
                             capture_output=True, text=True, timeout=120)
    assert too_big.returncode == 2 and "cannot be placed now" in too_big.stderr
