"""Tests inside the built images (marker `images`).

The session first builds both images with hack/images.sh, the script `make images` runs (incremental: the base,
the build layers and the wheels are cached under ~/.cache/ascend-hybrid/): the `images` fixture of tests/conftest.py,
shared with the container runtime's end-to-end test. Where podman, buildah, runc or mmdebstrap are missing the
script installs them with apt-get; where it cannot build, every test here fails with the end of its log (never
skips).
"""
