"""The MindSpore scheduler process of a dynamic cluster (MS_ROLE=MS_SCHED), started by the launcher in pod 0.

It only forms the cluster: init() with MS_ROLE=MS_SCHED serves the workers' registration and heartbeats on
MS_SCHED_HOST:MS_SCHED_PORT until they finish, and reports a worker that stops answering.
"""

from __future__ import annotations


def main() -> int:
    import mindspore as ms
    from mindspore.communication import init

    ms.set_device("CPU")  # the scheduler computes nothing; it needs no accelerator
    init()
    return 0
