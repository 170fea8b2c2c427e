"""The generated files of the repository stay in step with their sources: the CRD in crds/ and in the chart."""

from __future__ import annotations

import yaml

from ascend_hybrid.devtools import chartgen
from ascend_hybrid.spec import crd

CRD = crd.build()


def test_committed_copies_have_no_drift(repo_root):
    assert chartgen.stale_crd_copies() == []
    built = {crd.CRD_FILE_NAME: CRD, crd.CHANNEL_CRD_FILE_NAME: crd.build_channel()}
    for folder in (repo_root / "crds", repo_root / "charts" / "ascend-hybrid-operator" / "crds"):
        assert sorted(path.name for path in folder.iterdir()) == sorted(built)
        for name, manifest in built.items():
            assert (folder / name).read_text() == crd.generated()[name]
            assert yaml.safe_load((folder / name).read_text()) == manifest


def test_drift_is_detected_on_a_tampered_copy(tmp_path):
    good, bad, missing = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "missing.yaml"
    text = crd.render()
    assert chartgen.write_crd(((good, text), (bad, text))) == [good, bad]
    tampered = bad.read_text().replace("shortNames:\n    - ahj\n", "shortNames:\n    - ahx\n")
    assert tampered != bad.read_text()
    bad.write_text(tampered)
    assert chartgen.stale_crd_copies(((good, text), (bad, text), (missing, text))) == [bad, missing]
