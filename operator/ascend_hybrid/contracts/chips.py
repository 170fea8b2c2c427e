"""What each Ascend chip generation offers a job: the one table the API, the rules (and their CEL), the inventory
and the placer read (design §3, §5).

A generation's figures: chips per node (the default `npu.perPod`), the chip counts one pod may take (what the
device plugin can allocate), the HCCS ring size where chips are not fully meshed (910A: two rings of 4 joined
by PCIe; a pod of ≤ 4 chips must sit inside one ring), and whether nodes form super-pods (A3: rank table v1.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class ChipSpec:
    name: str
    chips_per_node: int
    allowed_per_pod: tuple[int, ...]
    ring_size: int | None = None  # None: every chip of a node reaches every other at full HCCS bandwidth
    super_pods: bool = False      # nodes belong to super-pods: the rank table is v1.2 with super_pod_list

    def rings(self, chip_ids: Iterable[int]) -> dict[int, int]:
        """Chip id → ring index (0: chips 0-3, 1: chips 4-7 on 910A); empty when the chip has no rings."""
        if self.ring_size is None:
            return {}
        return {chip: chip // self.ring_size for chip in chip_ids}

    @property
    def ring_count(self) -> int:
        return self.chips_per_node // self.ring_size if self.ring_size else 0

    def ring_bound(self, per_pod: int) -> bool:
        """Whether a pod of `per_pod` chips must be kept inside one HCCS ring: 2 to ring-size chips (one chip sits
        in one ring whichever it is; a whole node spans both by design)."""
        return self.ring_size is not None and 1 < per_pod <= self.ring_size


CHIPS: Mapping[str, ChipSpec] = MappingProxyType({
    "910A": ChipSpec("910A", chips_per_node=8, allowed_per_pod=(1, 2, 4, 8), ring_size=4),
    "910B": ChipSpec("910B", chips_per_node=8, allowed_per_pod=tuple(range(1, 9))),
    "A3": ChipSpec("A3", chips_per_node=16, allowed_per_pod=tuple(range(2, 17, 2)), super_pods=True),
})
CHIP_NAMES = tuple(CHIPS)
MAX_CHIPS_PER_POD = max(max(spec.allowed_per_pod) for spec in CHIPS.values())


def spec_of(chip: str) -> ChipSpec:
    try:
        return CHIPS[chip]
    except KeyError:
        raise ValueError(f"unknown chip type {chip!r}: expected {', '.join(CHIP_NAMES)}") from None


# CEL views of the table (the CRD's x-kubernetes-validations), keyed by `self.npu.chip`.
def cel_chips_per_node(chip_expression: str) -> str:
    entries = ", ".join(f"'{name}': {spec.chips_per_node}" for name, spec in CHIPS.items())
    return f"{{{entries}}}[{chip_expression}]"


def cel_allowed_per_pod(chip_expression: str) -> str:
    entries = ", ".join(f"'{name}': [{', '.join(map(str, spec.allowed_per_pod))}]" for name, spec in CHIPS.items())
    return f"{{{entries}}}[{chip_expression}]"


def cel_allowed_text(chip_expression: str) -> str:
    entries = ", ".join(f"'{name}': '{', '.join(map(str, spec.allowed_per_pod))}'" for name, spec in CHIPS.items())
    return f"{{{entries}}}[{chip_expression}]"
