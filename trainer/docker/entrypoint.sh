#!/bin/bash
# Trainer image entrypoint: MindSpore on Ascend needs the CANN toolkit's environment (library paths, op
# packages), which the toolkit publishes as a script to source; the CPU variant has none and skips it.
set -euo pipefail
for env_script in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh; do
    if [ -f "$env_script" ]; then
        # shellcheck disable=SC1090
        source "$env_script"
    fi
done
exec ascend-hybrid-trainer "${@:-launch}"
