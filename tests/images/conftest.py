"""Tests inside the built images (marker `images`).

The session first builds both images with hack/images.sh, the script `make images` runs (incremental: the base,
the build layers and the wheels are cached under ~/.cache/ascend-hybrid/). Where podman, buildah, runc or
mmdebstrap are missing the script installs them with apt-get; where it cannot build, every test here fails with
the end of its log (never skips).
"""

from __future__ import annotations

import pytest

from support.images import BuildFailed, Images, build


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Images:
    try:
        return build(tmp_path_factory.mktemp("images") / "build.log")
    except BuildFailed as failure:
        pytest.fail(str(failure), pytrace=False)
