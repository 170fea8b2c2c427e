"""The generated files of the repository stay in step with their sources: the CRD in crds/ and in the chart."""

from __future__ import annotations

import yaml

from ascend_hybrid.devtools import chartgen
from ascend_hybrid.spec import crd

CRD = crd.build()


def test_committed_copies_have_no_drift(repo_root):
    assert chartgen.stale_crd_copies() == []
    targets = [repo_root / "crds" / crd.CRD_FILE_NAME,
               repo_root / "charts" / "ascend-hybrid-operator" / "crds" / crd.CRD_FILE_NAME]
    assert list(chartgen.crd_paths()) == targets
    for target in targets:
        assert target.read_text() == crd.render()
        assert yaml.safe_load(target.read_text()) == CRD


def test_drift_is_detected_on_a_tampered_copy(tmp_path):
    good, bad, missing = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "missing.yaml"
    assert chartgen.write_crd((good, bad)) == [good, bad]
    tampered = bad.read_text().replace("shortNames:\n    - ahj\n", "shortNames:\n    - ahx\n")
    assert tampered != bad.read_text()
    bad.write_text(tampered)
    assert chartgen.stale_crd_copies((good, bad, missing)) == [bad, missing]
