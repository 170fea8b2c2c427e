"""A job's first pass reads its rank-table ConfigMap (and its LauncherChannel) only when its status says one was
written."""

from __future__ import annotations

from ascend_hybrid.controller.loop import Controller, Indexes
from support.builders import job_body


class ConfigMapKube:
    def __init__(self):
        self.reads = []

    def read_config_map(self, namespace, name):
        self.reads.append((namespace, name))
        return {"data": {"hccl.json": '{"status": "completed", "version": "1.0"}'}}

    def read_launcher_channel(self, namespace, name):
        self.reads.append((namespace, name))
        return {"data": {"generation": "0"}}


def observe_first(status: dict):
    kube = ConfigMapKube()
    controller = Controller(kube=kube, bound_indexes=Indexes(nodes=list, npu_pods=list, job_pods=lambda key: [],
                                                       device_infos=list))
    job = job_body({"parallelism": {"data": 2, "tensor": 8}, "npu": {"perPod": 8}})
    job["metadata"].update(namespace="ns", uid="u")
    job["status"] = status
    try:
        observed = controller.observe(("ns", "job"), job)
        controller.observe(("ns", "job"), job)  # read once per process at most
    finally:
        controller.queue.close()
    return kube.reads, observed.rank_table


def test_a_new_job_has_no_rank_table_to_read():
    assert observe_first({}) == ([], None)


def test_a_job_whose_status_names_its_rank_table_reads_it_once():
    reads, table = observe_first({"rankTable": {"configMap": "rings-config-job", "status": "completed"}})
    assert reads == [("ns", "rings-config-job"), ("ns", "job-recovery")]  # and the launchers' channel
    assert table == {"status": "completed", "version": "1.0"}
