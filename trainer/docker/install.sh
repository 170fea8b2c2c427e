#!/bin/sh
# The install steps of both images, shared by the Dockerfile and check_install_steps.sh (which runs them in a
# fresh virtualenv).
#   install.sh operator WHEEL_DIR   the ascend-hybrid distribution (operator + trainer code, no MindSpore)
#   install.sh mindspore            MindSpore ${MINDSPORE_VERSION} and numpy ${NUMPY_VERSION} only (the trainer
#                                   image installs them in a layer before the project wheel)
#   install.sh trainer WHEEL_DIR    both: MindSpore and numpy, then the distribution
# WHEELHOUSE (optional, a directory; hack/images.sh mounts its wheel cache there): install from it without the
# network when it holds everything, otherwise download what is missing into it first, so the next build of any
# image finds MindSpore's ~800 MB of wheels there. pip's own HTTP cache is no use for this: it stores only
# responses with cache headers, which a proxy may strip.
set -eu
role=$1
wheel_dir=${2:-}

pip_install() {
    if [ -z "${WHEELHOUSE:-}" ]; then
        python3 -m pip install --no-cache-dir --disable-pip-version-check "$@"
        return
    fi
    offline_log=$(mktemp)
    if python3 -m pip install --no-cache-dir --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" \
        "$@" >"$offline_log" 2>&1; then
        cat "$offline_log"
        rm -f "$offline_log"
        echo "install.sh: installed from the wheelhouse $WHEELHOUSE without the network"
        return
    fi
    rm -f "$offline_log"
    echo "install.sh: the wheelhouse $WHEELHOUSE lacks some of $*; downloading them into it"
    python3 -m pip download --no-cache-dir --disable-pip-version-check --dest "$WHEELHOUSE" "$@"
    # `pip download` of a local wheel copies it too; the project's own wheel is rebuilt every time, never cached.
    rm -f "$WHEELHOUSE"/ascend_hybrid-*.whl
    python3 -m pip install --no-cache-dir --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" "$@"
}

install_mindspore() {
    # The versions come from build args; the [trainer] extra pins the pair the CPU tests ran with.
    pip_install "mindspore==${MINDSPORE_VERSION}" "numpy==${NUMPY_VERSION}"
}

install_wheel() {
    wheel=$(find "$wheel_dir" -maxdepth 1 -name 'ascend_hybrid-*.whl' | head -n 1)
    if [ -z "$wheel_dir" ] || [ -z "$wheel" ]; then
        echo "install.sh: no ascend_hybrid-*.whl in '$wheel_dir'" >&2
        exit 1
    fi
    pip_install "$wheel"
}

case "$role" in
    operator) install_wheel ;;
    mindspore) install_mindspore ;;
    trainer)
        install_mindspore
        install_wheel
        ;;
    *)
        echo "install.sh: role must be operator, mindspore or trainer, not $role" >&2
        exit 1
        ;;
esac
