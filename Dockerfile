# syntax=docker/dockerfile:1.7
#
# Two images from one tree (the chart and deploy/examples use these names):
#   docker build --target operator -t ascend-hybrid/operator:0.1.0 .
#   docker build --target trainer  -t ascend-hybrid/trainer:0.1.0 .          # Ascend: CANN toolkit base
#   docker build --target trainer  --build-arg TRAINER_BASE=python:3.11-slim-bookworm \
#                -t ascend-hybrid/trainer:0.1.0-cpu .                           # CPU variant, no NPUs needed
# MindSpore on Ascend needs the CANN toolkit inside the image: TRAINER_BASE must be a CANN image whose toolkit
# version MindSpore ${MINDSPORE_VERSION} supports and whose Python is 3.11 (the MindSpore wheel is cp311).
# Without a registry or a Docker engine, `make images` (hack/images.sh) builds the operator and the CPU trainer
# with podman/buildah from a Debian base (PYTHON_IMAGE = TRAINER_BASE = that base) and tests them (tests/images).
# WHEELHOUSE (a build arg, unset by default): a directory of wheels mounted into the build (see install.sh).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG TRAINER_BASE=ascendai/cann:8.3.rc1-910b-ubuntu22.04-py3.11

# --- the project wheel (operator and trainer code; one distribution) ---------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY trainer ./trainer
RUN python3 -m pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /wheels .

# --- operator: slim Python, non-root, `ascend-hybrid run` ----------------------------------------------------
FROM ${PYTHON_IMAGE} AS operator
ARG APP_UID=10001
ARG WHEELHOUSE=
COPY --from=wheel /wheels /tmp/wheels
COPY trainer/docker/install.sh /tmp/install.sh
RUN sh /tmp/install.sh operator /tmp/wheels \
    && rm -rf /tmp/wheels /tmp/install.sh \
    && useradd --uid "${APP_UID}" --no-create-home --shell /usr/sbin/nologin ascend-hybrid
USER ${APP_UID}
# A command, not an entrypoint: `podman run IMAGE` runs the operator and `podman run IMAGE ascend-hybrid --help`
# (any command) works as written; the chart sets `command: [ascend-hybrid]` and its own args.
CMD ["ascend-hybrid", "run"]

# --- trainer: CANN base (or plain Python for the CPU variant), non-root, the launcher ------------------------
FROM ${TRAINER_BASE} AS trainer
ARG APP_UID=10001
# The Ascend driver's device nodes belong to group HwHiAiUser (gid 1000 on MindCluster hosts); the trainer user
# joins that gid so it can open /dev/davinci* without root.
ARG ASCEND_GID=1000
ARG MINDSPORE_VERSION=2.10.0
ARG NUMPY_VERSION=1.26.4
ARG WHEELHOUSE=
USER 0
# MindSpore's CPU kernels link libgomp.so.1 (GNU OpenMP), which python:*-slim and minimal Debian bases lack (CANN
# images have it). Not pinned: TRAINER_BASE is Debian or Ubuntu, whose libgomp1 versions differ.
# hadolint ignore=DL3008
RUN if ! python3 -c "import ctypes.util, sys; sys.exit(not ctypes.util.find_library('gomp'))"; then \
        apt-get update \
        && apt-get install -y --no-install-recommends libgomp1 \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# MindSpore and numpy in a layer of their own, before the project wheel: a code change does not reinstall them.
# They go to python3's site-packages; a base without `python` gets a link to python3, and the build fails unless
# the first `python` on PATH sees them.
COPY trainer/docker/install.sh /tmp/install.sh
RUN MINDSPORE_VERSION="${MINDSPORE_VERSION}" NUMPY_VERSION="${NUMPY_VERSION}" sh /tmp/install.sh mindspore \
    && (command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python) \
    && python -c "import importlib.metadata as m; m.version('mindspore'); m.version('numpy')"
COPY --from=wheel /wheels /tmp/wheels
COPY --chmod=0755 trainer/docker/entrypoint.sh /usr/local/bin/ascend-hybrid-trainer-entrypoint
RUN MINDSPORE_VERSION="${MINDSPORE_VERSION}" NUMPY_VERSION="${NUMPY_VERSION}" sh /tmp/install.sh trainer /tmp/wheels \
    && rm -rf /tmp/wheels /tmp/install.sh \
    && (getent group "${ASCEND_GID}" >/dev/null || groupadd --gid "${ASCEND_GID}" HwHiAiUser) \
    && useradd --uid "${APP_UID}" --gid "${ASCEND_GID}" --create-home --shell /bin/bash trainer \
    && mkdir -p /checkpoints && chown "${APP_UID}:${ASCEND_GID}" /checkpoints
ENV PYTHONUNBUFFERED=1
USER ${APP_UID}
WORKDIR /home/trainer
# metrics (design §9); the MindSpore scheduler port (2222) is set by the operator's env
EXPOSE 9400
ENTRYPOINT ["/usr/local/bin/ascend-hybrid-trainer-entrypoint"]
CMD ["launch"]
