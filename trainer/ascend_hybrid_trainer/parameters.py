"""How many parameters the trainer's model (model.py) builds, counted from the configuration alone.

Pure: no MindSpore. tests/contract/test_parameter_count.py builds the MindSpore model for every preset and compares
its real count with this one and with the operator's planner count. With h hidden, d = h / heads, kv key/value
heads, f the feed-forward size, E experts, V the vocabulary and s the sequence length:

- attention: Q and output h² each, K and V h·d·kv each (2h² + 2h²·kv/heads; 4h² without grouped-query attention);
- feed-forward: 2·h·f (gelu) or 3·h·f (swiglu: gate, up, down); an MoE layer has E of them plus the router E·h;
- two layer norms per layer and a final one, 2h each (gamma, beta);
- token embedding V·h, learned positions s·h, untied LM head V·h. No biases anywhere.
"""

from __future__ import annotations

from typing import cast

from .config import ModelConfig


def attention_parameters(model: ModelConfig) -> int:
    # ModelConfig.__post_init__ replaces a None kv_heads with heads
    h, kv_width = model.hidden, model.head_dim * cast(int, model.kv_heads)
    return 2 * h * h + 2 * h * kv_width


def ffn_matrices(model: ModelConfig) -> int:
    return 3 if model.ffn_type == "swiglu" else 2


def feed_forward_parameters(model: ModelConfig) -> int:
    one = ffn_matrices(model) * model.hidden * model.ffn_hidden
    if model.is_moe:
        return model.experts * one + model.experts * model.hidden
    return one


def layer_parameters(model: ModelConfig) -> int:
    return attention_parameters(model) + feed_forward_parameters(model) + 2 * 2 * model.hidden


def parameter_breakdown(model: ModelConfig, seq_length: int) -> dict[str, int]:
    return {
        "layers": model.layers * layer_parameters(model),
        "embedding": model.vocab * model.hidden,
        "positions": seq_length * model.hidden,
        "final_norm": 2 * model.hidden,
        "lm_head": model.vocab * model.hidden,
    }


def parameter_count(model: ModelConfig, seq_length: int) -> int:
    """Every trainable parameter of GPTWithLoss(model, ..., seq_length, ...)."""
    return sum(parameter_breakdown(model, seq_length).values())
