"""Which backend this container has, and the NPU utilization npu-smi reports. No MindSpore import: the launcher
uses it before any worker starts."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from .config import ConfigError

DEVICE_TARGETS = ("CPU", "Ascend")


def detect_device_target(env: Mapping[str, str] = os.environ, dev_root: str = "/dev") -> str:
    """AHJ_DEVICE_TARGET when set; otherwise Ascend when the driver's device nodes are mounted into the
    container (the device plugin mounts /dev/davinci_manager and /dev/davinci<N>), else CPU."""
    explicit = env.get("AHJ_DEVICE_TARGET")
    if explicit:
        if explicit not in DEVICE_TARGETS:
            raise ConfigError(f"AHJ_DEVICE_TARGET={explicit!r}: must be one of {', '.join(DEVICE_TARGETS)}")
        return explicit
    if os.path.exists(os.path.join(dev_root, "davinci_manager")) or glob.glob(os.path.join(dev_root, "davinci[0-9]*")):
        return "Ascend"
    return "CPU"


# One chip of ASCEND_VISIBLE_DEVICES: a number ("4"), or a device name as MindCluster's ascend-operator injects it
# from the device plugin's huawei.com/Ascend910 annotation ("Ascend910-4"; "Ascend910B-4" and the like too).
VISIBLE_CHIP = re.compile(r"^(?:[A-Za-z][A-Za-z0-9]*-)?(\d+)$")


def visible_devices(env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The chip ids of ASCEND_VISIBLE_DEVICES ("4,5" or "Ascend910-4,Ascend910-5" → ["4", "5"]), or None."""
    raw = env.get("ASCEND_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        return None
    chips = []
    for part in (part.strip() for part in raw.split(",")):
        if not part:
            continue
        match = VISIBLE_CHIP.match(part)
        if match is None:
            raise ConfigError(f"ASCEND_VISIBLE_DEVICES={raw!r}: {part!r} is neither a chip number (\"4\") nor a "
                              "device name (\"Ascend910-4\")")
        chips.append(str(int(match.group(1))))
    return chips


def logical_device_id(physical_id: str, visible: list[str] | None, rank: int) -> int:
    """DEVICE_ID for MindSpore: with ASCEND_VISIBLE_DEVICES the container numbers its chips 0..n-1 in that
    order (msrun also exports the local index), so the rank table's chip id is mapped to its position there."""
    if visible is None:
        return int(physical_id)
    if physical_id not in visible:
        raise ConfigError(
            f"rank table: rank {rank} is on chip {physical_id}, but ASCEND_VISIBLE_DEVICES={','.join(visible)} "
            f"does not list it (the device plugin gave this container other chips than the rank table names)")
    return visible.index(physical_id)


AICORE_USAGE = re.compile(r"Aicore Usage Rate\(%\)\s*:\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_aicore_usage(npu_smi_output: str) -> float | None:
    """`npu-smi info -t usages -i <card>` prints `Aicore Usage Rate(%) : 37`; None when the line is absent."""
    match = AICORE_USAGE.search(npu_smi_output)
    return float(match.group(1)) if match else None


def read_npu_utilization(device_ids: list[int], timeout: float = 5.0) -> dict[str, float]:
    """Utilization per chip id, from npu-smi when the container has it; empty when it does not (CPU)."""
    if not shutil.which("npu-smi"):
        return {}
    readings = {}
    for device_id in device_ids:
        try:
            result = subprocess.run(["npu-smi", "info", "-t", "usages", "-i", str(device_id)],
                                    capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        usage = parse_aicore_usage(result.stdout)
        if usage is not None:
            readings[str(device_id)] = usage
    return readings
