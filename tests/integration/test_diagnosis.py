"""Diagnosis end to end on the real apiserver + scheduler + kwok: a failing pod's termination message and reason
classify the failure, the failure policy (defaults and user rules) decides, node and chip faults restart the job
as disruptions that do not consume backoffLimit; the simulated telemetry turns the anomaly conditions on and off.

Needs 4 Ready 910B nodes of 8 chips (the session cluster has them). The last two tests run the real trainer
through the process runtime and need the trainer that writes its termination message (docs/troubleshooting.md).
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from ascend_hybrid.contracts.ascend import pod_chip_ids
from ascend_hybrid.devcluster.nodes import fleet
from ascend_hybrid.devcluster.runtime import helper as runtime_helper
from ascend_hybrid.devcluster.runtime.launch import RUNTIME_ANNOTATION
from ascend_hybrid.devcluster.telemetry import exporter, figures
from ascend_hybrid.devcluster.testing.pods import outcome_annotations, termination_report
from support.losses import MODEL
from support.operator_harness import Jobs, OperatorProcess, install_crd, job_manifest, wait_for

pytestmark = pytest.mark.integration

TELEMETRY_INTERVAL = 1


@pytest.fixture(scope="module")
def cluster(dev_cluster):
    install_crd(dev_cluster)
    assert len(dev_cluster.nodes("910B")) >= 4, "the diagnosis tests need four 910B nodes"
    return dev_cluster


@pytest.fixture
def jobs(cluster, namespace, tmp_path):
    operator = OperatorProcess(str(cluster.kubeconfig), tmp_path / "operator.log",
                               extra_args=("--telemetry-interval", TELEMETRY_INTERVAL)).start()
    handle = Jobs(cluster.api, namespace, operator)
    yield handle
    handle.delete_all(timeout=90)
    operator.stop()


def condition(status: dict, kind: str) -> dict:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def warnings(jobs: Jobs, name: str, reason: str, within: float = 10.0) -> list[str]:
    """The job's Warning events of `reason`, once there is one (the operator posts a pass's events after its status
    write, so the status may show first), or none after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = [message for kind, why, message in jobs.events(name) if kind == "Warning" and why == reason]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def fail(jobs: Jobs, name: str, attempt: int, index: int, **outcome) -> dict:
    """Makes pod `index` of the attempt fail as the kwok stage does: exit code, termination message, reason."""
    victim = next(p for p in jobs.pods(name, attempt=attempt)
                  if p["metadata"]["labels"]["hybrid.ascend.dev/pod-index"] == str(index))
    annotations = outcome_annotations("fail", **outcome)
    jobs.core.patch_namespaced_pod(victim["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": annotations}})
    return victim


def two_pods(name: str, **spec) -> dict:
    return job_manifest(name, data=2, tensor=8, per_pod=8, **spec)


FAIL_AT_ONCE = [
    ("ConfigError", {"exit_code": 2, "termination_message": termination_report(
        "ConfigError", 8, None, "training.seqLength=0: must be >= 1")}, "ConfigError", "training.seqLength=0"),
    ("DataError", {"exit_code": 5, "termination_message": termination_report(
        "DataError", 8, 0, "token id 70000 is outside the vocabulary of 512")}, "DataError", "vocab"),
    ("DeviceOutOfMemory", {"exit_code": 4, "termination_message": termination_report(
        "DeviceOutOfMemory", 9, 0, "Out of Memory!!! Request memory size: 2147483648B")}, "DeviceOutOfMemory",
     "the planner's prediction was"),
    ("NumericalDivergence", {"exit_code": 6, "termination_message": termination_report(
        "NumericalDivergence", 8, 2, "loss 2.4e13 is above 10 x its lowest 6.26")}, "NumericalDivergence",
     "learningRate"),
    ("host OOM kill", {"exit_code": 137, "reason": "OOMKilled"}, "DeviceOutOfMemory", "limits.memory"),
]


@pytest.mark.parametrize("what, outcome, cause, hint_word", FAIL_AT_ONCE, ids=[case[0] for case in FAIL_AT_ONCE])
def test_a_failure_a_restart_cannot_help_fails_the_job_at_once(jobs, what, outcome, cause, hint_word):
    name = "once"
    jobs.create(two_pods(name, runPolicy={"backoffLimit": 3}))
    jobs.wait_running(name)
    victim = fail(jobs, name, 1, 1, **outcome)
    status = jobs.wait_phase(name, "Failed", timeout=60)
    failure = status["lastFailure"]
    assert (failure["cause"], failure["action"], failure["attempt"]) == (cause, "FailJob", 1), failure
    assert (failure["pod"], failure["node"], failure["exitCode"]) == (
        victim["metadata"]["name"], victim["spec"]["nodeName"], outcome["exit_code"])
    assert hint_word in failure["hint"]
    assert status["attempt"] == 1 and status.get("restarts", 0) == 0 and not status.get("avoidedNodes")
    assert condition(status, "Failed")["reason"] == cause
    events = warnings(jobs, name, cause)
    assert len(events) == 1 and failure["hint"][:200] in events[0]


RESTARTS = [
    ("HCCLConnectTimeout", {"exit_code": 7, "termination_message": termination_report(
        "HCCLConnectTimeout", 8, None, "EI0006: Getting socket times out. wait socket establish timeout")}, True),
    ("HCCLExecTimeout", {"exit_code": 7, "termination_message": termination_report(
        "HCCLExecTimeout", 12, 40, "EI0002: The wait execution of the Notify register times out.")}, True),
    ("Unknown", {"exit_code": 3}, False),  # no message: the log's tail, no cause — restart, and blame no node
]


@pytest.mark.parametrize("cause, outcome, avoids", RESTARTS, ids=[case[0] for case in RESTARTS])
def test_a_failure_that_may_pass_restarts_the_gang_avoiding_the_node_only_when_it_is_suspect(jobs, cause, outcome,
                                                                                              avoids):
    name = "again"
    jobs.create(two_pods(name, runPolicy={"backoffLimit": 2}))
    jobs.wait_running(name)
    victim = fail(jobs, name, 1, 1, **outcome)
    status = jobs.wait_running(name, timeout=60, attempt=2)
    failure = status["lastFailure"]
    assert failure["cause"] == cause and failure["pod"] == victim["metadata"]["name"], failure
    assert failure["action"] == ("RestartJobAvoidingNode" if avoids else "RestartJob")
    node = victim["spec"]["nodeName"]
    assert status["avoidedNodes"] == ([node] if avoids else [])
    if avoids:
        assert node not in status["placement"]["nodes"]
    assert status["restarts"] == 1 and status.get("disruptions", 0) == 0
    assert condition(status, "Restarting")["reason"] == "Running"  # turned off again by attempt 2
    assert len(warnings(jobs, name, cause)) == 1


def test_user_rules_ignore_exit_code_42_and_fail_on_hccl_exec_timeout(jobs):
    name = "ruled"
    rules = [{"exitCodes": [42], "action": "Ignore"}, {"causes": ["HCCLExecTimeout"], "action": "FailJob"}]
    jobs.create(two_pods(name, runPolicy={"backoffLimit": 0, "failurePolicy": {"rules": rules}}))
    jobs.wait_running(name)
    fail(jobs, name, 1, 0, exit_code=42)
    status = jobs.wait_running(name, timeout=60, attempt=2)  # backoffLimit 0, yet restarted: ignored
    assert (status["restarts"], status["ignoredFailures"], status["lastFailure"]["action"]) == (1, 1, "Ignore")
    assert status["avoidedNodes"] == []
    victim = fail(jobs, name, 2, 1, exit_code=7, termination_message=termination_report(
        "HCCLExecTimeout", 9, 3, "Heartbeat Lost"))
    status = jobs.wait_phase(name, "Failed", timeout=60)
    assert status["lastFailure"]["cause"] == "HCCLExecTimeout" and status["lastFailure"]["action"] == "FailJob"
    assert status["lastFailure"]["pod"] == victim["metadata"]["name"]
    assert condition(status, "Failed")["reason"] == "HCCLExecTimeout"
    assert "rules[1] (causes HCCLExecTimeout)" in condition(status, "Failed")["message"]
    assert status["attempt"] == 2 and status["avoidedNodes"] == []


@pytest.mark.parametrize("rules, message", [
    ([{"causes": ["Unknown"], "exitCodes": [1], "action": "Ignore"}],
     "each rule sets exactly one of causes, exitCodes or podConditions"),
    ([{"causes": ["ConfigError"], "action": "RestartJobAvoidingNode"}], "would mark a healthy node"),
    ([{"causes": ["HCCLTimeout"], "action": "FailJob"}], "spec.runPolicy.failurePolicy.rules[0].causes[0]: Unsupported value"),
])
def test_a_malformed_rule_is_refused_at_admission(jobs, rules, message):
    with pytest.raises(client.ApiException) as refused:
        jobs.create(two_pods("refused", runPolicy={"failurePolicy": {"rules": rules}}))
    assert refused.value.status == 422 and message in refused.value.body, refused.value.body


def test_a_node_made_not_ready_restarts_elsewhere_without_consuming_the_backoff_limit(jobs):
    name = "disrupted"
    jobs.create(two_pods(name, runPolicy={"backoffLimit": 0}))
    status = jobs.wait_running(name)
    doomed = status["placement"]["nodes"][1]
    fleet.set_node_ready(jobs.core, doomed, False)
    try:
        status = jobs.wait_running(name, timeout=60, attempt=2)
    finally:
        fleet.set_node_ready(jobs.core, doomed, True)
    assert status["phase"] == "Running" and doomed not in status["placement"]["nodes"]
    assert (status["restarts"], status["disruptions"]) == (1, 1)  # backoffLimit 0: a counted restart would fail it
    assert status["avoidedNodes"] == [doomed] and status["lastFailure"]["cause"] == "NodeNotReady"
    assert len(warnings(jobs, name, "NodeNotReady")) == 1


def test_an_unhealthy_chip_under_a_running_pod_restarts_avoiding_its_node(jobs):
    name = "chipped"
    jobs.create(two_pods(name, runPolicy={"backoffLimit": 0}))
    jobs.wait_running(name)
    pod = jobs.pods(name, attempt=1)[0]
    node, chip = pod["spec"]["nodeName"], min(pod_chip_ids(pod))
    fleet.set_chip_health(jobs.core, node, chip, False)
    try:
        status = jobs.wait_running(name, timeout=60, attempt=2)
    finally:
        fleet.set_chip_health(jobs.core, node, chip, True)
    failure = status["lastFailure"]
    assert (failure["cause"], failure["node"], failure["pod"]) == ("ChipUnhealthy", node, pod["metadata"]["name"])
    assert f"chip {chip} of {node}" in failure["hint"]
    assert status["avoidedNodes"] == [node] and (status["restarts"], status["disruptions"]) == (1, 1)


# -- telemetry: anomalies ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def telemetry(cluster):
    """The simulated trainer endpoints and npu-exporter; stopped afterwards when this module started them."""
    if cluster.paths is None:
        pytest.fail("the telemetry simulation is a helper of a dev cluster: point AHJ_KUBECONFIG at a dev cluster's "
                    "kubeconfig (its directory holds cluster.json)", pytrace=False)
    had = exporter.is_running(cluster.paths)
    exporter.ensure_running(cluster.paths)
    yield cluster
    if not had:
        exporter.stop(cluster.paths)


def simulated(name: str, monitoring: dict, **annotations) -> dict:
    pinned = {figures.UTILIZATION_ANNOTATION: "90", figures.STEP_SECONDS_ANNOTATION: "0.25", **annotations}
    return job_manifest(name, data=2, tensor=4, per_pod=4, annotations=pinned, training={"steps": 100000},
                        monitoring=monitoring)


def wait_condition(jobs: Jobs, name: str, kind: str, value: str, timeout: float = 60) -> dict:
    return wait_for(lambda: (lambda s: condition(s, kind).get("status") == value and s)(jobs.status(name)), timeout,
                    f"{name}: {kind}={value}", lambda: jobs.describe(name), interval=0.5)


def test_a_skewed_chip_turns_load_imbalanced_on_then_off(telemetry, jobs):
    name = "skewed"
    jobs.create(simulated(name, {"utilizationSpreadPercent": 30, "imbalanceSamples": 2}))
    jobs.wait_running(name)
    wait_condition(jobs, name, "LoadImbalanced", "False")  # balanced readings come in first
    pod = jobs.pods(name, attempt=1)[1]
    chip = min(pod_chip_ids(pod))
    skew = {figures.CHIP_UTILIZATION_ANNOTATION: f"{chip}=15"}
    jobs.core.patch_namespaced_pod(pod["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": skew}})
    status = wait_condition(jobs, name, "LoadImbalanced", "True")
    message = condition(status, "LoadImbalanced")["message"]
    assert f"chip {chip} of pod {pod['metadata']['name']} at 15%" in message and "stage split" in message
    assert len(warnings(jobs, name, "LoadImbalanced")) == 1
    unskew = {figures.CHIP_UTILIZATION_ANNOTATION: None}
    jobs.core.patch_namespaced_pod(pod["metadata"]["name"], jobs.namespace, {"metadata": {"annotations": unskew}})
    status = wait_condition(jobs, name, "LoadImbalanced", "False")
    assert condition(status, "LoadImbalanced")["reason"] == "Balanced" and status["phase"] == "Running"
    assert len(warnings(jobs, name, "LoadImbalanced")) == 1  # one event when it turned on, none when it went


def test_a_stalled_trainer_turns_training_stalled_on(telemetry, jobs):
    name = "stalled"
    jobs.create(simulated(name, {"stallSeconds": 4}, **{figures.STALL_AFTER_ANNOTATION: "6"}))
    jobs.wait_running(name)
    status = wait_condition(jobs, name, "TrainingStalled", "True", timeout=60)
    assert "no training step for" in condition(status, "TrainingStalled")["message"]
    assert status["phase"] == "Running" and status["monitoring"]["lastStep"] == 24  # 6 s of 0.25 s steps
    assert len(warnings(jobs, name, "TrainingStalled")) == 1


def test_a_slowed_trainer_is_straggling(telemetry, jobs):
    name = "slowed"
    slow = {figures.SLOW_AFTER_ANNOTATION: "10", figures.SLOW_STEP_SECONDS_ANNOTATION: "1.5"}
    jobs.create(simulated(name, {"stragglerFactor": 2}, **slow))
    jobs.wait_running(name)
    status = wait_condition(jobs, name, "Straggling", "True", timeout=60)
    assert "stragglerFactor=2" in condition(status, "Straggling")["message"]
    assert len(warnings(jobs, name, "Straggling")) == 1


# -- the real trainer (process runtime): needs the trainer's termination message ---------------------------------
@pytest.fixture
def process_runtime(cluster):
    if cluster.paths is None or runtime_helper.ensure_running(cluster.paths) is None:
        pytest.fail("the process runtime is a helper of a dev cluster whose stages know it: point AHJ_KUBECONFIG at "
                    "a dev cluster's kubeconfig", pytrace=False)
    return cluster


def real_job(name: str, steps: int, **spec) -> dict:
    return job_manifest(name, data=2, tensor=1, per_pod=1, annotations={RUNTIME_ANNOTATION: "process"}, model=MODEL,
                        training={"steps": steps, "seed": 7, "seqLength": 32, "globalBatchSize": 2,
                                  **spec.pop("training", {})}, **spec)


def test_real_dp2_with_an_absurd_learning_rate_fails_as_numerical_divergence_after_one_attempt(process_runtime, jobs):
    name = "diverged"
    jobs.create(real_job(name, 200, training={"learningRate": 1e6}))
    status = wait_for(lambda: (lambda s: s.get("phase") in ("Succeeded", "Failed") and s)(jobs.status(name)), 300,
                      f"{name} to end", lambda: jobs.describe(name))
    assert status["phase"] == "Failed", "a loss of 1e13 trained to the end"
    failure = status["lastFailure"]
    assert (failure["cause"], failure["action"], status["attempt"]) == ("NumericalDivergence", "FailJob", 1), failure
    assert status.get("restarts", 0) == 0 and not status.get("avoidedNodes")
    assert isinstance(failure["step"], int) and 1 <= failure["step"] < 200
    assert isinstance(failure["rank"], int) and failure["rank"] in (0, 1)
    assert "learningRate (now 1e+06)" in failure["hint"]
    events = warnings(jobs, name, "NumericalDivergence")
    assert len(events) == 1 and "gradientClipNorm" in events[0]


def test_real_job_whose_scheduler_is_unreachable_is_hccl_connect_timeout_restarted_avoiding_the_node(
        process_runtime, jobs):
    name = "unreachable"
    # the whole-gang path: by default the ladder would first restart the ranks in place (docs/reliability.md),
    # which this Service can never let reach the scheduler either
    jobs.create(real_job(name, 50, hccl={"connectTimeoutSeconds": 15},
                         runPolicy={"backoffLimit": 1, "recovery": {"finestRung": "RestartGang"}}))
    sched = f"{name}-sched"
    wait_for(lambda: any(s.metadata.name == sched for s in jobs.core.list_namespaced_service(jobs.namespace).items),
             30, f"Service {sched}", lambda: jobs.describe(name), interval=0.05)
    # The workers of pod 1 reach pod 0's MindSpore scheduler only through this Service: with no pod behind it,
    # the scheduler is unreachable (the operator applies its Services once per generation, so this stays).
    jobs.core.patch_namespaced_service(sched, jobs.namespace,
                                       {"spec": {"selector": {"hybrid.ascend.dev/job": "nobody"}}})
    status = wait_for(lambda: (lambda s: ((s.get("lastFailure") or {}).get("cause") or s.get("phase") == "Succeeded")
                               and s)(jobs.status(name)), 300, f"{name}'s first failure", lambda: jobs.describe(name))
    failure = status["lastFailure"]
    assert failure["cause"] == "HCCLConnectTimeout", json.dumps(failure)
    assert failure["action"] == "RestartJobAvoidingNode" and failure["node"] in status["avoidedNodes"]
    assert status["attempt"] == 2 and status["restarts"] == 1
