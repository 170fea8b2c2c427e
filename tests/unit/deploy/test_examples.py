"""The example jobs in deploy/examples/ are what the docs and the demo say they are."""

from __future__ import annotations

import yaml

from ascend_hybrid.devcluster.runtime.launch import PROCESS_RUNTIME, RUNTIME_ANNOTATION
from ascend_hybrid.devtools import demo
from ascend_hybrid.spec.rules import parse
from support.paths import EXAMPLES


def test_the_demos_real_job_is_a_valid_dp2_job_on_two_single_chip_process_pods():
    manifest = yaml.safe_load((EXAMPLES / "tiny-dp2-real.yaml").read_text())
    resolved = parse(manifest)
    assert (resolved.world_size, resolved.pod_count, resolved.per_pod) == (2, 2, 1)
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {RUNTIME_ANNOTATION: PROCESS_RUNTIME}
    assert demo.prometheus_queries("tiny-dp2-real")["step"] == (
        'ascend_trainer_step{namespace="default",pod="tiny-dp2-real-a1-0"}')


def test_the_kueue_demos_teams_share_one_queue_that_fits_one_of_their_jobs():
    from ascend_hybrid.devcluster.nodes.manifests import node_manifest, plan_nodes
    from ascend_hybrid.devtools import kueue_demo
    from ascend_hybrid.spec import rules

    jobs = [rules.parse(kueue_demo.job(team)) for team in kueue_demo.TEAMS]
    assert [j.spec.scheduling.queue for j in jobs] == [kueue_demo.LOCAL_QUEUE] * 2
    nodes = [node_manifest(n) for n in plan_nodes(1, kueue_demo.DEMO_NODES, "910B", 2)]
    cluster_queue, *local_queues = kueue_demo.queue_objects(nodes)
    (flavor,) = cluster_queue["spec"]["resourceGroups"][0]["flavors"]
    quota = {r["name"]: int(r["nominalQuota"].rstrip("Gi")) for r in flavor["resources"]}
    npus = [j.pod_count * j.per_pod for j in jobs]
    assert npus[0] <= quota["huawei.com/Ascend910"] < sum(npus), "one job fits, both do not"
    assert sum(npus) <= kueue_demo.DEMO_NODES * 8, "the nodes could hold both: only the quota makes one wait"
    assert {(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in local_queues} == {
        (team, kueue_demo.CLUSTER_QUEUE) for team in kueue_demo.TEAMS}
