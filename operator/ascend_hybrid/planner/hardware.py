"""What the planner knows about a cluster: chips per node, HBM, peak FLOPS and the bandwidth of each link tier.

Built-in profiles carry the figures of docs/planner.md (from the Ascend product pages and measurements collected in
the planner reference); every figure can be overridden, and `--hardware FILE` describes any other machine. Pure:
the CLI reads the file and hands over its parsed YAML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ascend_hybrid.contracts.chips import CHIPS

GIB = 2 ** 30
# Seed §3.2: the Da Vinci Cube unit multiplies 16×16 tiles; a split matmul dimension that is not a multiple of 16 is
# padded up to one (the tile computes the padding too).
CUBE_TILE = 16
DEFAULT_COMPUTE_EFFICIENCY = 0.5  # achieved share of peak in transformer matmuls when a file does not say
DEFAULT_USABLE_FRACTION = 0.9  # seed §5.2 (docs/design.md §11): keep 10-20 % of HBM free; 10 % is the edge


class HardwareError(ValueError):
    """A hardware description the planner cannot use; the message names the key."""


@dataclass(frozen=True)
class Tier:
    """One link tier. `gbps` is GB/s per chip per direction; for a mesh it is per peer link, for rings per ring link."""

    gbps: float
    topology: str = "switch"  # switch | mesh | rings (intra-node only)
    ring_size: int | None = None
    efficiency: float = 1.0  # achieved share of `gbps` in collectives
    latency_us: float = 0.0  # per collective step
    cross_ring_gbps: float | None = None  # rings only: chips of different rings talk over this (PCIe on 910A)
    name: str = ""  # what explanations call the links, e.g. HCCS or RoCE

    def group_bandwidth(self, size: int) -> float:
        """Bytes/s one chip moves in a collective over `size` chips of this tier, efficiency included."""
        links = (size - 1) if self.topology == "mesh" else 1  # a full mesh gives each chip one link per peer
        return self.gbps * 1e9 * max(links, 1) * self.efficiency

    def transfer_seconds(self, size: int, bytes_per_chip: float, steps: int) -> float:
        if size <= 1 or bytes_per_chip <= 0:
            return 0.0
        return steps * self.latency_us * 1e-6 + bytes_per_chip / self.group_bandwidth(size)


@dataclass(frozen=True)
class ComputeModel:
    """How fast one chip runs each kind of work, beyond one scalar share of peak (docs/planner.md, "Calibration").

    A matmul of M×K by K×N reaches `matmul_efficiency` × Π d/(d + `half_dim`) of peak over its three dimensions
    (small per-device splits run slower); FlashAttention kernels reach `attention_efficiency` of peak on the
    work the causal mask leaves with 128-wide heads (other head sizes by the same d/(d + `half_dim`));
    element-wise (vector-unit) work — norms, activations, rotary, residual adds, softmax, cross-entropy, MoE
    permutation — is bound by HBM at `hbm_gbps` × `vector_efficiency`.
    """

    matmul_efficiency: float
    half_dim: float
    attention_efficiency: float
    hbm_gbps: float
    vector_efficiency: float
    # MoE expert matmuls (routed tokens gathered per expert, each expert's GEMM on its own share) reach this share
    # of what a dense matmul of their shape reaches: calibrated on the published MoE runs.
    expert_efficiency: float = 1.0

    def matmul_seconds(self, peak_flops: float, m: float, n: float, k: float, pad: bool = True) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        if pad:
            m, n, k = (-(-d // CUBE_TILE) * CUBE_TILE for d in (m, n, k))
        d0 = self.half_dim
        share = self.matmul_efficiency * (m / (m + d0)) * (n / (n + d0)) * (k / (k + d0))
        return 2 * m * n * k / (peak_flops * share)

    def attention_seconds(self, peak_flops: float, flops: float, head_dim: float) -> float:
        """FlashAttention's FLOPs at `attention_efficiency` for heads of ATTENTION_HEAD_REFERENCE: each of its two
        block matmuls (Q·Kᵀ, P·V) has the head size as one dimension, which the Cube runs at d/(d + half_dim) as it
        does any matmul's, so other head sizes scale by that factor against the reference's."""
        d0 = self.half_dim
        d = -(-head_dim // CUBE_TILE) * CUBE_TILE
        shape = (d / (d + d0)) / (ATTENTION_HEAD_REFERENCE / (ATTENTION_HEAD_REFERENCE + d0))
        return flops / (peak_flops * self.attention_efficiency * shape)

    def vector_seconds(self, bytes_moved: float) -> float:
        return bytes_moved / (self.hbm_gbps * 1e9 * self.vector_efficiency)


# The head size of every fitted FlashAttention run (docs/planner.md, "Calibration"): attentionEfficiency is the
# kernel's share at this head size.
ATTENTION_HEAD_REFERENCE = 128


@dataclass(frozen=True)
class Hardware:
    name: str
    chips_per_node: int
    hbm_gib: float
    usable_fraction: float
    peak_tflops: float
    compute_efficiency: float  # the scalar share of peak, used for everything when `compute` is None
    intra_node: Tier
    inter_node: Tier
    compute: ComputeModel | None = None  # shape-dependent compute (built-in profiles); None: the scalar above
    tensor_overlap: float = 0.0  # share of TP communication hidden under the matmuls it feeds (MC2 on Atlas A2/A3)
    step_scale: float = 1.0  # what this cluster's jobs measured against the predictions (plan --learn, observed.py)

    @property
    def usable_bytes(self) -> float:
        return self.hbm_gib * GIB * self.usable_fraction

    @property
    def achieved_flops(self) -> float:
        return self.peak_tflops * 1e12 * self.compute_efficiency

    def summary(self) -> dict[str, Any]:
        intra: dict[str, Any] = {"gbps": self.intra_node.gbps, "topology": self.intra_node.topology,
                                 "efficiency": self.intra_node.efficiency}
        if self.intra_node.ring_size:
            intra["ringSize"] = self.intra_node.ring_size
        return {"name": self.name, "chipsPerNode": self.chips_per_node, "hbmGiB": self.hbm_gib,
                "usableFraction": self.usable_fraction, "usableGiB": round(self.usable_bytes / GIB, 2),
                "peakTflops": self.peak_tflops, "computeEfficiency": self.compute_efficiency,
                "computeModel": "shape" if self.compute else "scalar", "tensorOverlap": self.tensor_overlap,
                **({"observedStepScale": round(self.step_scale, 4)} if self.step_scale != 1.0 else {}),
                "intraNode": intra, "interNode": {"gbps": self.inter_node.gbps,
                                                  "efficiency": self.inter_node.efficiency}}


# Figures of the planner reference §4 (docs/planner.md lists them with their sources):
# - 910A (Atlas 800 9000): 32 GB HBM, 256 TFLOPS FP16, two HCCS rings of ~30 GB/s links joined by PCIe,
#   100GE RoCE per chip (12.5 GB/s). No PCIe figure is published there, so crossing rings is priced like RoCE.
# - 910B (Atlas 800T A2): 64 GB, 280-376 TFLOPS by SKU (376 taken: override for yours), full HCCS mesh of 56 GB/s
#   per chip pair whose all-reduce reaches 55-64 % of it (0.6 taken), 200GE RoCE per chip (~25 GB/s).
# - A3 (Atlas 900 A3 SuperPoD): 64 GB per die, ~376-390 TFLOPS per die (376 taken), HCCS/UB at
#   ~196 GB/s per die across the super-pod, so nodes of one super-pod talk at that rate too.
# Chips per node and the HCCS ring size come from the one chip table (chips.py).
# The compute models are calibrated on published runs (docs/planner.md, "Calibration"): HBM bandwidths are the
# product figures (910A 1.2 TB/s HBM2, 910B and an A3 die 1.6 TB/s HBM2e); the matmul and attention shares of peak,
# the half-size dimension and the vector share are fitted on the dense 910B runs not held out by least absolute
# log error, 910A's shares and the expert share by least squares (hack/calibration_fit.py).
# A3 has no published training figure in the calibration set: it takes 910B's per-die figures.
COMPUTE_910B = ComputeModel(matmul_efficiency=0.65, half_dim=130, attention_efficiency=0.43, hbm_gbps=1600,
                            vector_efficiency=0.45, expert_efficiency=0.52)
# The same Da Vinci cube (16×16×16) as 910B: the half-size dimension, the attention and expert shares are 910B's
# (no published 910A run uses FlashAttention or experts); the calibration fits the matmul share and finds the
# vector work at the HBM roof.
COMPUTE_910A = ComputeModel(matmul_efficiency=0.50, half_dim=COMPUTE_910B.half_dim,
                            attention_efficiency=COMPUTE_910B.attention_efficiency, hbm_gbps=1200, vector_efficiency=1.0,
                            expert_efficiency=COMPUTE_910B.expert_efficiency)
# No built-in profile assumes TP overlap: the published MindSpeed-LLM runs pass --use-mc2, but its argument check
# switches MC2 off (modellink/training/arguments.py, validate_args_decorator: args.use_mc2 = False), and the
# calibration agrees (a fitted overlap goes to 0). A stack that does overlap (MC2 on Atlas A2/A3, MindSpore's
# fine-grained interleaving) says so with a hardware file's tensorOverlap.
TENSOR_OVERLAP = 0.0

BUILTIN: dict[str, Hardware] = {
    "910A": Hardware("910A", CHIPS["910A"].chips_per_node, 32, DEFAULT_USABLE_FRACTION, 256,
                     COMPUTE_910A.matmul_efficiency,
                     Tier(30, "rings", ring_size=CHIPS["910A"].ring_size, cross_ring_gbps=12.5, name="HCCS"),
                     Tier(12.5, name="RoCE"), COMPUTE_910A, TENSOR_OVERLAP),
    "910B": Hardware("910B", CHIPS["910B"].chips_per_node, 64, DEFAULT_USABLE_FRACTION, 376,
                     COMPUTE_910B.matmul_efficiency, Tier(56, "mesh", efficiency=0.6, name="HCCS"),
                     Tier(25, name="RoCE"), COMPUTE_910B, TENSOR_OVERLAP),
    "A3": Hardware("A3", CHIPS["A3"].chips_per_node, 64, DEFAULT_USABLE_FRACTION, 376, COMPUTE_910B.matmul_efficiency,
                   Tier(196, "switch", name="HCCS"), Tier(196, name="UB"), COMPUTE_910B, TENSOR_OVERLAP),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)  # extra keys of a user's own are allowed


class _TierFile(_Strict):
    gbps: float = Field(gt=0)
    topology: Literal["switch", "mesh", "rings"] = "switch"
    ring_size: int | None = Field(None, alias="ringSize", ge=1)
    efficiency: float = Field(1.0, gt=0, le=1)
    latency_us: float = Field(0.0, alias="latencyUs", ge=0)
    cross_ring_gbps: float | None = Field(None, alias="crossRingGbps", gt=0)
    name: str = ""


class _InterTierFile(_TierFile):
    topology: Literal["switch"] = "switch"


class _ComputeFile(_Strict):
    matmul_efficiency: float = Field(alias="matmulEfficiency", gt=0, le=1)
    half_dim: float = Field(0.0, alias="halfDim", ge=0)
    attention_efficiency: float = Field(alias="attentionEfficiency", gt=0, le=1)
    hbm_gbps: float = Field(alias="hbmGbps", gt=0)
    vector_efficiency: float = Field(1.0, alias="vectorEfficiency", gt=0, le=1)
    expert_efficiency: float = Field(1.0, alias="expertEfficiency", gt=0, le=1)


class _HardwareFile(_Strict):
    name: str = Field(min_length=1)
    chips_per_node: int = Field(alias="chipsPerNode", ge=1)
    hbm_gib: float = Field(alias="hbmGiB", gt=0)
    usable_fraction: float = Field(alias="usableFraction", gt=0, le=1)
    peak_tflops: float = Field(alias="peakTflops", gt=0)
    compute_efficiency: float | None = Field(None, alias="computeEfficiency", gt=0, le=1)
    compute: _ComputeFile | None = None
    tensor_overlap: float = Field(0.0, alias="tensorOverlap", ge=0, le=1)
    intra_node: _TierFile = Field(alias="intraNode")
    inter_node: _InterTierFile = Field(alias="interNode")


def _problem(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return f"{where}: is required"
    return f"{where}={error.get('input')!r}: {error['msg'].lower()}"


def _tier(raw: _TierFile, *, intra: bool) -> Tier:
    ring_size = raw.ring_size
    if intra and raw.topology == "rings" and ring_size is None:
        raise HardwareError("intraNode.ringSize: is required when intraNode.topology is rings")
    cross = raw.cross_ring_gbps
    name = raw.name or ("intra-node links" if intra else "inter-node network")
    return Tier(raw.gbps, raw.topology, ring_size, raw.efficiency, raw.latency_us, cross, name)


def from_mapping(document: Any) -> Hardware:
    """A hardware file's parsed YAML → Hardware; HardwareError names the first key that is wrong."""
    if not isinstance(document, Mapping):
        raise HardwareError(f"expected a mapping of hardware keys, found {type(document).__name__}")
    try:
        raw = _HardwareFile.model_validate(dict(document))
    except ValidationError as error:
        raise HardwareError(_problem(error.errors()[0])) from None
    intra = _tier(raw.intra_node, intra=True)
    inter = _tier(raw.inter_node, intra=False)
    if intra.topology == "rings" and intra.cross_ring_gbps is None:
        intra = replace(intra, cross_ring_gbps=inter.gbps)  # unknown cross-ring link: assume no better than RoCE
    # A scalar computeEfficiency overrides a compute block: everything then runs at that one share of peak.
    compute = None
    if raw.compute is not None and raw.compute_efficiency is None:
        c = raw.compute
        compute = ComputeModel(c.matmul_efficiency, c.half_dim, c.attention_efficiency, c.hbm_gbps, c.vector_efficiency,
                               c.expert_efficiency)
    scalar = raw.compute_efficiency or (compute.matmul_efficiency if compute else DEFAULT_COMPUTE_EFFICIENCY)
    return Hardware(raw.name, raw.chips_per_node, raw.hbm_gib, raw.usable_fraction, raw.peak_tflops, scalar, intra,
                    inter, compute, raw.tensor_overlap)


def builtin(chip: str, **overrides: Any) -> Hardware:
    """A built-in profile, with any Hardware field replaced (e.g. peak_tflops=313 for a 910B3)."""
    if chip not in BUILTIN:
        raise HardwareError(f"unknown chip {chip!r} (known: {', '.join(BUILTIN)})")
    return replace(BUILTIN[chip], **overrides) if overrides else BUILTIN[chip]
