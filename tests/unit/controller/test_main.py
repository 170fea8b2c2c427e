"""`ascend-hybrid run`'s own inputs: the planner hardware profiles file (as the chart's ConfigMap holds it)."""

from __future__ import annotations

import pytest
import yaml

from ascend_hybrid.controller.main import load_hardware_profiles
from support.paths import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "unit" / "deploy" / "golden" / "chart-namespaced-monitoring.yaml"
A100 = REPO_ROOT / "tests" / "support" / "fixtures" / "planner" / "a100-80g.yaml"


def test_the_charts_hardware_profiles_configmap_is_what_the_operator_reads(tmp_path):
    configmap = next(o for o in yaml.safe_load_all(GOLDEN.read_text())
                     if o and o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-hardware"))
    path = tmp_path / "profiles.yaml"
    path.write_text(configmap["data"]["profiles.yaml"])
    profiles = load_hardware_profiles(str(path))
    assert list(profiles) == ["910B3"] and profiles["910B3"].peak_tflops == 313


def test_one_hardware_file_is_a_profile_too():
    profiles = load_hardware_profiles(str(A100))
    assert list(profiles) == ["a100-80g"] and load_hardware_profiles(None) == {}


@pytest.mark.parametrize("text, complaint", [
    ("- {name: x}\n", "profile 0: "),
    ("{not yaml", "not valid YAML"),
])
def test_a_bad_profiles_file_is_one_clear_error(tmp_path, text, complaint):
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=complaint):
        load_hardware_profiles(str(path))
