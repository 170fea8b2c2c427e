#!/bin/sh
# The install steps of both images, shared by the Dockerfile and check_install_steps.sh (which runs them in a
# fresh virtualenv, since no container engine runs where this project is tested).
#   install.sh operator WHEEL_DIR   the ascend-hybrid distribution (operator + trainer code, no MindSpore)
#   install.sh trainer WHEEL_DIR    the same plus MindSpore ${MINDSPORE_VERSION} and numpy ${NUMPY_VERSION}
set -eu
role=$1
wheel_dir=$2
wheel=$(find "$wheel_dir" -maxdepth 1 -name 'ascend_hybrid-*.whl' | head -n 1)
if [ -z "$wheel" ]; then
    echo "install.sh: no ascend_hybrid-*.whl in $wheel_dir" >&2
    exit 1
fi
python3 -m pip install --no-cache-dir --disable-pip-version-check "$wheel"
case "$role" in
    operator) ;;
    trainer)
        # The versions come from build args; the [trainer] extra pins the pair the CPU tests ran with.
        python3 -m pip install --no-cache-dir --disable-pip-version-check \
            "mindspore==${MINDSPORE_VERSION}" "numpy==${NUMPY_VERSION}"
        ;;
    *)
        echo "install.sh: role must be operator or trainer, not $role" >&2
        exit 1
        ;;
esac
