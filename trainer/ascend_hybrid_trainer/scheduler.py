"""The MindSpore scheduler process of a dynamic cluster (MS_ROLE=MS_SCHED), started by the launcher in pod 0.

It only forms the cluster: init() with MS_ROLE=MS_SCHED serves the workers' registration and heartbeats on
MS_SCHED_HOST:MS_SCHED_PORT until they finish, and reports a worker that stops answering. When it fails it writes
its termination record like a worker: PeerFailed naming the worker it lost first, HCCLConnectTimeout when the
cluster never formed within MS_TOPO_TIMEOUT.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from . import defaults, failures


def main(env: Mapping[str, str] = os.environ) -> int:
    import mindspore as ms
    from mindspore.communication import init

    ms.set_device("CPU")  # the scheduler computes nothing; it needs no accelerator
    try:
        init()
    except Exception as error:  # noqa: BLE001 - classified, written down, exit code of its cause
        record = failures.record_for_exception(error, None, None)
        print(f"[MindSpore scheduler] ended with {record.cause}: {record.detail}", file=sys.stderr, flush=True)
        failures.write_record(env.get("AHJ_TERMINATION_LOG") or defaults.ENV["AHJ_TERMINATION_LOG"], record)
        return record.exit_code()
    return 0
