"""The example jobs in deploy/examples/ are what the docs and the demo say they are."""

from __future__ import annotations

import yaml

from ascend_hybrid.devcluster.runtime.launch import PROCESS_RUNTIME, RUNTIME_ANNOTATION
from ascend_hybrid.devtools import demo
from ascend_hybrid.rules import parse
from support.paths import EXAMPLES


def test_the_demos_real_job_is_a_valid_dp2_job_on_two_single_chip_process_pods():
    manifest = yaml.safe_load((EXAMPLES / "tiny-dp2-real.yaml").read_text())
    effective = parse(manifest)
    assert (effective.world_size, effective.pod_count, effective.per_pod) == (2, 2, 1)
    assert manifest["spec"]["template"]["metadata"]["annotations"] == {RUNTIME_ANNOTATION: PROCESS_RUNTIME}
    assert demo.prometheus_queries("tiny-dp2-real")["step"] == (
        'ascend_trainer_step{namespace="default",pod="tiny-dp2-real-a1-0"}')
