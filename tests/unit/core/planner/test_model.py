"""The planner's memory and time models against the published worked examples, each expected value derived here
from the paper's formula (and, where the paper prints a table, checked against its rounding)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_hybrid.planner import compute, hardware, memory, search, timing
from ascend_hybrid.planner.workload import Strategy, Workload
from ascend_hybrid.spec import rules
from support.paths import PLANNER_FIXTURES

FIXTURES = PLANNER_FIXTURES
GIB = 2 ** 30


# --- ZeRO (Rajbhandari et al., SC'20): 7.5 B parameters, 64-way data parallelism ----------------------------

PSI, D = 7.5e9, 64
ZERO_CASES = [  # (what is partitioned, the paper's formula, the paper's Table 1 figure in GB)
    (memory.UNSHARDED, (2 + 2 + 12) * PSI, 120),
    (memory.ZERO_OPTIMIZER, (2 + 2) * PSI + 12 * PSI / D, 31.4),
    (memory.ZERO_GRADIENTS, 2 * PSI + (2 + 12) * PSI / D, 16.6),
    (memory.ZERO_WEIGHTS, (2 + 2 + 12) * PSI / D, 1.9),
]


@pytest.mark.parametrize("sharded, formula, published", ZERO_CASES)
def test_zero_table_through_the_states_model(sharded, formula, published):
    got = memory.state_bytes(PSI, memory.MIXED_PRECISION_ADAM, sharded, D)
    assert got == pytest.approx(formula)
    assert abs(got / 1e9 - published) <= 0.1


def test_bytes_per_parameter_follow_dtype_and_optimizer():
    assert memory.MIXED_PRECISION_ADAM.per_parameter == 2 + 2 + 4 + 8
    assert memory.MEGATRON_ADAM.per_parameter == 2 + 4 + 4 + 8  # fp32 main gradients: Megatron's 18 B/param
    fp32_sgd = memory.StatesFormat(weight_bytes=4, gradient_bytes=4, master_bytes=0, optimizer_bytes=4)
    assert memory.state_bytes(1000, fp32_sgd) == 12 * 1000
    # MindSpore's parallel optimizer splits weights and optimizer states, not gradients: 2 + 14/d
    assert memory.state_bytes(PSI, sharded=memory.MINDSPORE_PARALLEL_OPTIMIZER, data=D) == pytest.approx(
        2 * PSI + 14 * PSI / D)
    # parameters the optimizer cannot shard stay whole
    assert memory.state_bytes(100, sharded=memory.ZERO_WEIGHTS, data=4, shardable=60) == pytest.approx(
        16 * (60 / 4 + 40))


def test_the_parallel_optimizer_shards_over_the_context_parallel_ranks_too():
    """CP ranks hold the same weights (they split only the sequence): MindSpore's optimizer parallel splits a
    parameter over its duplicate slices, Megatron-core's distributed optimizer over DP × CP. Mixtral 8×22B at TP 8,
    PP 4, CP 2, DP 1 (MindSpeed-LLM's 32K script) holds 4.4 B parameters per device: 16 B each do not fit 64 GB."""
    w = Workload(56, 6144, 48, 8, 16384, "swiglu", 32000, 8, 2, 32768, 16, True, capacity_factor=1.0)
    alone = Strategy(1, 8, 4, micro_batches=16, optimizer_shard=True, sequence_parallel=True)
    with_cp = replace(alone, context=2)
    assert alone.replicas == 1 and with_cp.replicas == 2
    parameters, shardable = memory.stage_parameters(w, with_cp, 0)
    assert memory.stage_parameters(w, alone, 0) == (parameters, 0)
    assert shardable == parameters  # every first dimension here is even
    assert memory.stage_memory(w, with_cp, 0).states == pytest.approx(2 * parameters + 14 * parameters / 2)
    assert memory.stage_memory(w, alone, 0).states == pytest.approx(16 * parameters)
    assert memory.stage_memory(w, replace(with_cp, optimizer_shard=False), 0).states == pytest.approx(16 * parameters)


# --- Korthikanti et al. 2022, Fig. 1: the 22 B model -----------------------------------------------------------

def korthikanti_job() -> dict:
    return yaml.safe_load((FIXTURES / "korthikanti-22b.yaml").read_text())


def test_korthikanti_activations_from_the_formulas():
    resolved = rules.parse(korthikanti_job())
    w, s = Workload.from_job(resolved), Strategy.from_job(resolved)
    a, h, layers, seq, t, b = 64, 6144, 48, 2048, 8, 4
    assert (w.heads, w.hidden, w.layers, w.seq_length, s.tensor, s.micro_batch_size, s.pipeline) == (
        a, h, layers, seq, t, b, 1)
    sbh = seq * b * h
    tensor_only = sbh * (10 + 24 / t + 5 * a * seq / (h * t)) * layers
    sp_selective = sbh * 34 / t * layers
    assert memory.stage_memory(w, s, 0).activations == pytest.approx(tensor_only)
    assert memory.stage_memory(w, replace(s, sequence_parallel=True, recompute="selective"), 0).activations == (
        pytest.approx(sp_selective))
    assert tensor_only / GIB == 59.25 and sp_selective / GIB == 9.5625  # the paper's figures, exactly
    assert memory.stage_memory(w, replace(s, recompute="full"), 0).activations == pytest.approx(2 * sbh * layers)
    # weights + gradients + optimizer of the transformer layers at Megatron's 18 B/param: 45.5625 GiB
    transformer = 12 * h * h * layers / t
    assert memory.state_bytes(transformer, memory.MEGATRON_ADAM) / GIB == pytest.approx(45.5625)
    assert w.layer_parameters == 12 * h * h


def test_flash_attention_removes_the_score_term_only():
    resolved = rules.parse(korthikanti_job())
    w, s = Workload.from_job(resolved), Strategy.from_job(resolved)
    flash = replace(w, flash_attention=True)
    assert memory.layer_activation_bytes(flash, s) == pytest.approx(
        memory.layer_activation_bytes(w, replace(s, recompute="selective")))
    assert memory.layer_activation_bytes(flash, s) < memory.layer_activation_bytes(w, s)


def test_grouped_query_attention_and_swiglu_sizes():
    base = Workload(2, 4096, 32, 32, 11008, "gelu", 32000, 0, 0, 4096, 8, False)
    gqa = replace(base, kv_heads=8)
    h = 4096
    assert base.attention_parameters == 4 * h * h
    assert gqa.attention_parameters == 2 * h * h + 2 * h * h * 8 // 32
    assert replace(base, ffn_type="swiglu").mlp_parameters == 3 * h * 11008


def test_in_flight_micro_batches_of_1f1b_and_interleaving():
    s = Strategy(1, 1, 8, micro_batches=32)
    assert [memory.in_flight(s, stage) for stage in (0, 3, 7)] == [8, 5, 1]
    assert memory.in_flight(Strategy(1, 1, 8, micro_batches=4), 0) == 4
    interleaved = replace(s, virtual_stages=2)
    assert memory.in_flight(interleaved, 0) == pytest.approx(8 * (1 + 7 / 16))


# --- time ------------------------------------------------------------------------------------------------

def dense_gpt(**changes) -> Workload:
    return replace(Workload(24, 2048, 16, 16, 8192, "gelu", 50304, 0, 0, 2048, 64, False), **changes)


@settings(max_examples=200, deadline=None)
@given(seq=st.integers(1, 1 << 17), window=st.integers(1, 1 << 18), flash=st.booleans())
def test_a_sliding_window_attends_at_most_the_sequence_and_more_with_a_wider_window(seq, window, flash):
    w = dense_gpt(seq_length=seq, flash_attention=flash, sliding_window=window)
    wider = replace(w, sliding_window=window + 1)
    assert 0 < w.attended_keys <= wider.attended_keys <= seq
    if not flash or window >= seq:
        assert w.attended_keys == seq  # without FlashAttention every score is computed, then masked
    else:
        # twice the mean keys per query (the formulas count full, unmasked scores): w·(w+1)/2 + (s-w)·w keys in all
        assert w.attended_keys == pytest.approx(min(seq, 2 * (window * (window + 1) / 2 + (seq - window) * window)
                                                    / seq))


def test_a_sliding_window_shrinks_only_the_flash_attention_core():
    """Mistral 7B's 4K window at 32K tokens: the attention core costs about a quarter of the causal one (3 840 keys a
    query on average against 16 384); the matmuls and the vector work are the same."""
    hw = hardware.builtin("910B")
    s = Strategy(1, 8, 1, micro_batches=32, sequence_parallel=True)
    causal = Workload(32, 4096, 32, 8, 14336, "swiglu", 32000, 0, 0, 32768, 32, True)
    windowed = replace(causal, sliding_window=4096)
    full, banded = (compute.micro_batch_work(w, s, hw, 32, head=False) for w in (causal, windowed))
    mean_keys = 4096 - 4096 * 4095 / (2 * 32768)
    assert banded.attention == pytest.approx(full.attention * mean_keys / (32768 / 2))
    assert full.total - full.attention == pytest.approx(banded.total - banded.attention)
    unfused = replace(windowed, flash_attention=False)
    assert compute.micro_batch_work(unfused, s, hw, 32, head=False) == compute.micro_batch_work(
        replace(causal, flash_attention=False), s, hw, 32, head=False)


def test_flash_attention_runs_at_its_share_for_128_wide_heads_and_by_the_cubes_factor_otherwise():
    model = hardware.builtin("910B").compute
    peak, flops = 376e12, 1e15
    assert model.attention_seconds(peak, flops, 128) == pytest.approx(flops / (peak * model.attention_efficiency))
    d0 = model.half_dim
    for head in (64, 80, 256):
        factor = (head / (head + d0)) / (128 / (128 + d0))
        assert model.attention_seconds(peak, flops, head) == pytest.approx(model.attention_seconds(peak, flops, 128)
                                                                           / factor)
    assert model.attention_seconds(peak, flops, 64) > model.attention_seconds(peak, flops, 128)
    assert model.attention_seconds(peak, flops, 120) == model.attention_seconds(peak, flops, 128)  # padded to 16


def test_ring_attention_adds_the_merge_of_every_step_after_the_first():
    """Counted from MindSpeed's forward_update_without_fused and causal_grad_update (compute.RING_MERGE_BYTES):
    62 bytes per element of the device's output forward and 6 per gradient element backward, cp - 1 times."""
    hw = hardware.builtin("910B")
    w = Workload(4, 2048, 16, 2, 11008, "swiglu", 151936, 0, 0, 32768, 16, True)
    single = compute.micro_batch_work(w, Strategy(1, 1, 1, context=1), hw, 4, head=False)
    for cp in (2, 4):
        ring = compute.micro_batch_work(w, Strategy(1, 1, 1, context=cp), hw, 4, head=False)
        tokens, width, kv = 32768 / cp, 2048, 2 * 128
        merge = hw.compute.vector_seconds((cp - 1) * tokens * width * compute.RING_MERGE_BYTES)
        grads = hw.compute.vector_seconds((cp - 1) * tokens * (width + kv) * compute.RING_GRAD_ADD_BYTES)
        assert ring.attention == pytest.approx(single.attention / cp + 4 * (merge + grads))
    assert compute.RING_MERGE_BYTES == 62 and compute.RING_GRAD_ADD_BYTES == 6


def test_model_flops_are_korthikanti_appendix_a():
    w = dense_gpt()
    B, s, L, h, V = w.global_batch, w.seq_length, w.layers, w.hidden, w.vocab
    assert timing.model_flops_per_step(w) == pytest.approx(72 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L)))


@pytest.mark.parametrize("recompute, factor, vocab_term", [("none", 72, 12), ("full", 96, 16)])
def test_compute_time_is_narayanan_eq3_at_peak_times_efficiency(recompute, factor, vocab_term):
    """A scalar profile (a hardware file's computeEfficiency) prices FLOPs at peak × efficiency."""
    w, hw = dense_gpt(), replace(hardware.builtin("910B"), compute=None)
    s = Strategy(8, 1, 1, micro_batches=8, micro_batch_size=1, recompute=recompute)
    B, seq, L, h, V = w.global_batch, w.seq_length, w.layers, w.hidden, w.vocab
    flops = factor * B * seq * L * h * h * (1 + seq / (6 * h) + V / (vocab_term * L * h))
    got = timing.step_time(w, s, hw, 0).compute
    assert got * hw.achieved_flops * s.world == pytest.approx(flops)


def test_bubble_fraction_of_the_seed_case_and_interleaving():
    assert timing.bubble_fraction(Strategy(2, 8, 8, micro_batches=32)) == pytest.approx(7 / 39)
    assert timing.bubble_fraction(Strategy(2, 8, 8, micro_batches=32, virtual_stages=2)) == pytest.approx(7 / 71)
    assert timing.bubble_fraction(Strategy(2, 8, 1, micro_batches=1)) == 0


def test_tensor_parallel_traffic_and_the_mesh_links():
    """8·b·s·h·(t - 1)/t elements per layer (Narayanan §3) over t - 1 HCCS links of the 910B mesh."""
    w, hw = dense_gpt(layers=1, vocab=8), hardware.builtin("910B")
    for t in (2, 8):
        s = Strategy(8 // t, t, 1, micro_batches=1, micro_batch_size=1)
        elements = 8 * 1 * w.seq_length * w.hidden * (t - 1) / t
        bandwidth = 56e9 * (t - 1) * 0.6
        assert timing.step_time(w, s, hw, 0).tensor == pytest.approx(2 * elements / bandwidth)


def test_data_parallel_goes_hierarchical_across_nodes():
    hw = replace(hardware.builtin("910B"), inter_node=hardware.Tier(25))
    gradients = 1e9
    inside = timing.Group("data", 8, 1, 8, False)
    across = timing.Group("data", 16, 2, 8, False)
    assert timing._data_parallel_seconds(inside, hw, gradients) == pytest.approx(
        2 * 7 / 8 * gradients / (56e9 * 7 * 0.6))
    ring_step = 7 / 8 * gradients / (56e9 * 7 * 0.6)
    assert timing._data_parallel_seconds(across, hw, gradients) == pytest.approx(
        2 * ring_step + 2 * 1 / 2 * gradients / 8 / 25e9)


def test_groups_follow_the_rank_layout():
    hw = hardware.builtin("910B")
    seed = Strategy(2, 8, 8, 4, "intraNode", micro_batches=32, per_pod=8)
    layout = timing.groups(seed, hw)
    assert {kind: (g.size, g.tier) for kind, g in layout.items()} == {
        "tensor": (8, "intraNode"), "data": (2, "interNode"), "pipeline": (8, "interNode"),
        "expert": (4, "intraNode"), "context": (1, "none"), "gradients": (2, "interNode")}
    wide_ep = timing.groups(Strategy(4, 4, 1, 4, "dataParallel", per_pod=8), hw)["expert"]
    assert (wide_ep.nodes, wide_ep.tier) == (2, "interNode")
    ring = timing.groups(Strategy(1, 8, 1, per_pod=8), hardware.builtin("910A"))["tensor"]
    assert ring.tier == "crossRing"
    assert timing.groups(Strategy(2, 4, 1, per_pod=8), hardware.builtin("910A"))["tensor"].tier == "intraNode"


# --- hardware files --------------------------------------------------------------------------------------

def test_hardware_file_with_extra_keys():
    hw = hardware.from_mapping(yaml.safe_load((FIXTURES / "a100-80g.yaml").read_text()))
    assert (hw.name, hw.chips_per_node, hw.hbm_gib, hw.peak_tflops, hw.compute_efficiency) == (
        "a100-80g", 8, 80, 312, 0.5)
    assert hw.usable_bytes == 80 * 0.9 * GIB and hw.intra_node.topology == "switch"


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("hbmGiB"), "hbmGiB: is required"),
    (lambda d: d["intraNode"].pop("gbps"), "intraNode.gbps: is required"),
    (lambda d: d.update(usableFraction=1.5), "usableFraction=1.5"),
    (lambda d: d["intraNode"].update(topology="torus"), "intraNode.topology='torus'"),
    (lambda d: d["intraNode"].update(topology="rings"), "intraNode.ringSize: is required"),
    (lambda d: d.update(chipsPerNode="eight"), "chipsPerNode='eight'"),
])
def test_malformed_hardware_file_names_the_key(change, message):
    document = yaml.safe_load((FIXTURES / "a100-80g.yaml").read_text())
    change(document)
    with pytest.raises(hardware.HardwareError, match=message.replace(".", r"\.").replace("(", r"\(")):
        hardware.from_mapping(document)


def test_builtin_profiles_are_overridable_and_unknown_chips_named():
    assert hardware.builtin("910B", peak_tflops=313).peak_tflops == 313
    assert hardware.builtin("910B").usable_bytes / GIB == pytest.approx(57.6)
    with pytest.raises(hardware.HardwareError, match="unknown chip '910C'"):
        hardware.builtin("910C")


def test_a_pod_larger_than_a_node_is_refused():
    resolved = rules.parse({"metadata": {"name": "a3"}, "spec": {"parallelism": {"data": 16},
                                                               "npu": {"chip": "A3"}}})
    with pytest.raises(search.PlanError, match="perPod=16 exceeds chipsPerNode=8"):
        search.evaluate_job(resolved, hardware.builtin("910B"))


# --- gradient buckets (seed §3.1) and the calibrated compute model -------------------------------------

def test_gradient_buckets_expose_the_last_bucket_and_pay_a_latency_each():
    hw = replace(hardware.builtin("910B"), inter_node=hardware.Tier(25, latency_us=30))
    group = timing.Group("gradients", 16, 2, 8, False)
    gradients, backward = 4e9, 10.0  # a backward long enough to hide the whole reduction
    whole = timing._exposed_gradient_reduction(group, hw, gradients, backward, False, None)
    assert whole == 0.0
    one_bucket = timing._data_parallel_seconds(group, hw, 32e6)
    assert timing._exposed_gradient_reduction(group, hw, gradients, backward, False, 32) == pytest.approx(one_bucket)
    # no backward to hide behind: small buckets pay more latency in all
    small = timing._exposed_gradient_reduction(group, hw, gradients, 0.0, False, 1)
    large = timing._exposed_gradient_reduction(group, hw, gradients, 0.0, False, 64)
    assert small > large > timing._exposed_gradient_reduction(group, hw, gradients, 0.0, False, None) * 0.999


def test_a_scalar_compute_efficiency_overrides_the_shape_model_of_a_file():
    document = yaml.safe_load((FIXTURES / "a100-80g.yaml").read_text())
    shaped = {**document, "compute": {"matmulEfficiency": 0.7, "halfDim": 180, "attentionEfficiency": 0.5,
                                      "hbmGbps": 2000, "vectorEfficiency": 0.5}}
    shaped.pop("computeEfficiency")
    assert hardware.from_mapping(shaped).compute is not None
    assert hardware.from_mapping({**shaped, "computeEfficiency": 0.45}).compute is None
    assert hardware.from_mapping({**shaped, "computeEfficiency": 0.45}).compute_efficiency == 0.45


def test_small_per_device_matmul_dimensions_run_at_a_lower_share_of_peak():
    model = hardware.builtin("910B").compute
    peak = 376e12
    big = model.matmul_seconds(peak, 8192, 4096, 4096)
    sliced = model.matmul_seconds(peak, 8192, 512, 4096)
    assert sliced * 8 > big  # eight 512-wide slices take longer than the whole
    assert model.matmul_seconds(peak, 8192, 500, 4096) > model.matmul_seconds(peak, 8192, 512, 4096) * 0.99
    assert model.matmul_seconds(peak, 8192, 500, 4096, pad=False) < model.matmul_seconds(peak, 8192, 500, 4096)


def test_cube_alignment_names_the_misaligned_splits():
    w = Workload(8, 5120, 40, 40, 13824, "swiglu", 32000, 0, 0, 4096, 8, True)
    assert timing.misaligned_dimensions(w, Strategy(1, 8, 1)) == []
    odd = timing.misaligned_dimensions(w, Strategy(1, 5, 1, per_pod=5))
    assert "hidden/tensor=1024" not in odd and "ffnHidden/tensor=2764.8" in odd and "vocab/tensor=6400" not in odd
    assert timing.misalignment_seconds(w, Strategy(1, 5, 1, per_pod=5), hardware.builtin("910B")) > 0


# --- costs counted from MindSpeed-LLM's stack (docs/planner.md, "Calibration") ----------------------------------

MOE = Workload(4, 4096, 32, 8, 14336, "swiglu", 32000, 8, 2, 8192, 64, True, capacity_factor=1.0)


def test_the_loss_moves_52_bytes_per_logit_of_the_local_vocabulary_slice():
    """fp32 cross-entropy: 38 bytes per logit forward, 14 backward (compute.CROSS_ENTROPY_*_BYTES)."""
    hw = hardware.builtin("910B")
    small, large = (Workload(1, 4096, 32, 8, 14336, "swiglu", vocab, 0, 0, 4096, 8, True) for vocab in (32000, 128000))
    s = Strategy(1, 8, 1, micro_batches=1)

    def head(w: Workload) -> tuple[float, float]:
        with_head = timing.micro_batch_work(w, s, hw, 1, True, pad=False)
        without = timing.micro_batch_work(w, s, hw, 1, False, pad=False)
        return with_head.forward - without.forward, with_head.backward - without.backward

    model, peak, tokens = hw.compute, hw.peak_tflops * 1e12, 4096
    assert model is not None
    for w in (small, large):
        logits = model.matmul_seconds(peak, tokens, w.vocab / 8, w.hidden, pad=False)
        forward, backward = head(w)
        assert forward == pytest.approx(logits + model.vector_seconds(tokens * w.vocab / 8 * 38))
        assert backward == pytest.approx(2 * logits + model.vector_seconds(tokens * w.vocab / 8 * 14))


def test_the_expert_all_to_all_sends_the_sequence_parallel_shard():
    """Each TP rank dispatches the s/t tokens it holds under sequence parallelism (Megatron-core needs SP for MoE
    under TP): the EP traffic is t times smaller with SP than without."""
    hw = hardware.builtin("910B")
    s = Strategy(2, 4, 1, expert=2, expert_placement="dataParallel", micro_batches=1)
    whole = timing.step_time(MOE, s, hw, 0).expert
    shard = timing.step_time(MOE, s.with_flags("none", True, False), hw, 0).expert
    assert shard == pytest.approx(whole / 4, rel=1e-6)


def test_the_moe_permutation_is_not_split_by_sequence_parallelism_and_follows_the_placement():
    """The permutation runs on the routed copies each TP rank gathers: SP splits the norms' work, not this; intraNode
    EP leaves a rank 1/e of the TP group's routed copies, dataParallel EP all of its own."""
    hw = hardware.builtin("910B")
    model = hw.compute
    assert model is not None
    s = Strategy(1, 8, 1, expert=2, expert_placement="dataParallel", micro_batches=1)
    dense = replace(MOE, experts=0, top_k=0)
    norms_saved = model.vector_seconds(8192 * 2 * 10 * 4096 * (1 - 1 / 8))  # forward: what SP splits

    def forward(w: Workload, strategy: Strategy) -> float:
        return timing.micro_batch_work(w, strategy, hw, 1, False, pad=False).forward

    sp = s.with_flags("none", True, False)
    assert forward(MOE, s) - forward(MOE, sp) == pytest.approx(norms_saved)
    assert forward(dense, s) - forward(dense, sp) == pytest.approx(norms_saved)
    rows = 8192 * 4096 * 2  # bytes of one pass over the micro-batch's tokens
    permutation = model.vector_seconds(rows * (15 * 2 + 1 * 2))  # topK 2 routed copies, e 2 gathered
    intra = replace(s, expert_placement="intraNode")
    permutation_intra = model.vector_seconds(rows * (15 * 2 / 2 + 1))
    assert forward(MOE, s) - forward(MOE, intra) == pytest.approx(
        permutation - permutation_intra + _expert_matmuls(MOE, s, hw) - _expert_matmuls(MOE, intra, hw))


def _expert_matmuls(w: Workload, s: Strategy, hw: hardware.Hardware) -> float:
    """The router's and the local experts' matmuls of one layer (the shapes after attention's two)."""
    model = hw.compute
    assert model is not None
    shapes = compute._layer_matmuls(w, s, w.seq_length)[2:]
    return sum(model.matmul_seconds(hw.peak_tflops * 1e12, *shape, pad=False) for shape in shapes) / model.expert_efficiency
