"""The model's blocks on CPU against plain numpy: grouped-query attention (kvHeads key/value heads, each shared by
heads/kvHeads query heads), SwiGLU, their shapes and parameter counts, and where recompute is attached."""

from __future__ import annotations

import numpy as np
import pytest

from ascend_hybrid_trainer.config import ModelConfig, Parallelism, TrainingConfig
from ascend_hybrid_trainer.parameters import parameter_breakdown, parameter_count
from ascend_hybrid_trainer.strategy import plan_parallel

pytestmark = pytest.mark.trainer

SEQ = 6


@pytest.fixture(autouse=True)
def _pynative():
    import mindspore as ms

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")


def reference_attention(x, qkv_weight, output_weight, heads, kv_heads, seq, window=None):
    """Causal attention written out per head: head i·groups + j uses key/value head i; with a window, query q sees
    keys q - window + 1 … q only."""
    tokens, hidden = x.shape
    batch, d, groups = tokens // seq, hidden // heads, heads // kv_heads
    qkv = (x @ qkv_weight.T).reshape(batch, seq, kv_heads, groups + 2, d)
    context = np.zeros((batch, seq, kv_heads, groups, d))
    causal = np.triu(np.full((seq, seq), -np.inf), k=1)
    if window is not None:
        causal += np.tril(np.full((seq, seq), -np.inf), k=-window)
    for b in range(batch):
        for i in range(kv_heads):
            key, value = qkv[b, :, i, groups], qkv[b, :, i, groups + 1]
            for j in range(groups):
                scores = qkv[b, :, i, j] @ key.T / np.sqrt(d) + causal
                probs = np.exp(scores - scores.max(-1, keepdims=True))
                context[b, :, i, j] = (probs / probs.sum(-1, keepdims=True)) @ value
    return context.reshape(tokens, hidden) @ output_weight.T


@pytest.mark.parametrize("heads, kv_heads", [(8, 8), (8, 2), (8, 1), (6, 3)])
def test_grouped_query_attention_equals_the_per_head_reference(heads, kv_heads):
    import mindspore as ms

    from ascend_hybrid_trainer.model import Attention

    config = ModelConfig(layers=2, hidden=8 * heads, heads=heads, ffn_hidden=32, vocab=16, kv_heads=kv_heads)
    attention = Attention(config, SEQ, shards=None)
    d = config.head_dim
    assert attention.qkv.weight.shape == (kv_heads * (heads // kv_heads + 2) * d, config.hidden)
    assert attention.qkv.weight.size == config.hidden * config.hidden + 2 * config.hidden * d * kv_heads
    x = np.random.RandomState(heads + kv_heads).randn(2 * SEQ, config.hidden).astype(np.float32)
    got = attention(ms.Tensor(x)).asnumpy()
    expected = reference_attention(x.astype(np.float64), attention.qkv.weight.asnumpy().astype(np.float64),
                                   attention.output.weight.asnumpy().astype(np.float64), heads, kv_heads, SEQ)
    assert got.shape == (2 * SEQ, config.hidden)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("window", [1, 2, 4, SEQ])
def test_a_sliding_window_equals_the_reference_and_forgets_older_tokens(window):
    import mindspore as ms

    from ascend_hybrid_trainer.model import Attention

    config = ModelConfig(layers=1, hidden=32, heads=4, ffn_hidden=32, vocab=16, kv_heads=2, sliding_window=window)
    attention = Attention(config, SEQ, shards=None)
    x = np.random.RandomState(window).randn(2 * SEQ, 32).astype(np.float32)
    got = attention(ms.Tensor(x)).asnumpy()
    expected = reference_attention(x.astype(np.float64), attention.qkv.weight.asnumpy().astype(np.float64),
                                   attention.output.weight.asnumpy().astype(np.float64), 4, 2, SEQ, window)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    changed = x.copy()
    changed[0] += 5.0  # the first token of the first sample: outside the window of every query from `window` on
    after = attention(ms.Tensor(changed)).asnumpy()
    np.testing.assert_allclose(got[window:SEQ], after[window:SEQ], atol=1e-6)
    assert not np.allclose(got[window - 1], after[window - 1])


@pytest.mark.parametrize("window, mode, earlier", [(None, 2, 2147483647), (8, 4, 7)])
def test_flash_attention_takes_the_window_as_a_band(window, mode, earlier):
    """Ascend only to run, but MindSpore builds (and checks) the primitive anywhere: a window is sparse_mode 4
    (band) with the query's window - 1 earlier keys and no later one, on the same compressed causal mask."""
    from ascend_hybrid_trainer.model import FlashAttentionCore

    config = ModelConfig(layers=1, hidden=32, heads=4, ffn_hidden=32, vocab=16, kv_heads=2, sliding_window=window)
    core = FlashAttentionCore(config, 16, shards=None)
    assert (core.flash.sparse_mode, core.flash.pre_tokens, core.flash.next_tokens) == (mode, earlier, 0)
    assert core.mask.shape == (2048, 2048)


def test_a_later_token_never_changes_an_earlier_output():
    import mindspore as ms

    from ascend_hybrid_trainer.model import Attention

    config = ModelConfig(layers=1, hidden=32, heads=4, ffn_hidden=32, vocab=16, kv_heads=2)
    attention = Attention(config, SEQ, shards=None)
    x = np.random.RandomState(0).randn(SEQ, 32).astype(np.float32)
    changed = x.copy()
    changed[-1] += 5.0
    before, after = attention(ms.Tensor(x)).asnumpy(), attention(ms.Tensor(changed)).asnumpy()
    np.testing.assert_allclose(before[:-1], after[:-1], atol=1e-6)
    assert not np.allclose(before[-1], after[-1])


@pytest.mark.parametrize("ffn_type, matrices", [("gelu", 2), ("swiglu", 3)])
def test_the_feed_forward_is_gelu_or_swiglu(ffn_type, matrices):
    import mindspore as ms

    from ascend_hybrid_trainer.model import DenseFeedForward

    config = ModelConfig(layers=2, hidden=16, heads=2, ffn_hidden=24, vocab=16, ffn_type=ffn_type)
    ffn = DenseFeedForward(config, shards=None)
    params = {param.name.split(".")[0]: param.asnumpy().astype(np.float64) for param in ffn.trainable_params()}
    assert len(params) == matrices and sum(p.size for p in params.values()) == matrices * 16 * 24
    x = np.random.RandomState(1).randn(5, 16).astype(np.float32)
    output, balance = ffn(ms.Tensor(x))
    up = x @ params["ffn_in"].T
    if ffn_type == "swiglu":
        gate = x @ params["ffn_gate"].T
        hidden = gate / (1 + np.exp(-gate)) * up  # SiLU(gate) ⊙ up
    else:
        hidden = 0.5 * up * (1 + np.tanh(np.sqrt(2 / np.pi) * (up + 0.044715 * up**3)))  # GeLU (tanh form)
    np.testing.assert_allclose(output.asnumpy(), hidden @ params["ffn_out"].T, rtol=1e-3, atol=1e-4)
    assert float(balance) == 0.0


@pytest.mark.parametrize("model", [
    ModelConfig(layers=3, hidden=48, heads=6, ffn_hidden=80, vocab=40, kv_heads=2, ffn_type="swiglu"),
    ModelConfig(layers=2, hidden=32, heads=4, ffn_hidden=48, vocab=40, kv_heads=1, ffn_type="gelu"),
    ModelConfig(layers=2, hidden=32, heads=4, ffn_hidden=48, vocab=40, kv_heads=2, ffn_type="swiglu", experts=4),
])
def test_each_part_of_the_model_has_the_counted_parameters(model):
    import mindspore as ms

    from ascend_hybrid_trainer.model import GPTWithLoss

    plan = plan_parallel(Parallelism(), model, TrainingConfig(seq_length=SEQ, global_batch_size=2))
    network = GPTWithLoss(model, plan, SEQ, micro_batch=2)
    by_part: dict[str, int] = {}
    for param in network.trainable_params():
        part = ("positions" if "position" in param.name else "embedding" if "table" in param.name
                else "final_norm" if "final_norm" in param.name else "lm_head" if "loss_head" in param.name
                else "layers")
        by_part[part] = by_part.get(part, 0) + param.size
    assert by_part == parameter_breakdown(model, SEQ)
    ids = ms.Tensor(np.random.RandomState(2).randint(0, 40, (2, SEQ)).astype(np.int32))
    loss = float(network(ids, ids))
    assert np.isfinite(loss) and abs(loss - np.log(40)) < 0.5  # near the uniform guess at initialisation
    assert parameter_count(model, SEQ) == sum(by_part.values())


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_recompute_is_attached_to_the_layer_or_to_its_attention_core(recompute):
    from ascend_hybrid_trainer.model import GPTWithLoss

    model = ModelConfig(layers=2, hidden=16, heads=2, ffn_hidden=16, vocab=16)
    plan = plan_parallel(Parallelism(), model, TrainingConfig(seq_length=SEQ, recompute=recompute))
    network = GPTWithLoss(model, plan, SEQ, micro_batch=1)
    for layer in network.layers:
        assert (layer._recompute_cell is not None) == (recompute == "full")
        assert (layer.attention.core._recompute_cell is not None) == (recompute == "selective")
        assert layer.ffn._recompute_cell is None
