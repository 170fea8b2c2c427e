"""The model presets (design §3) and a job's resolved model: the preset, then the spec's explicit fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the annotation only: this module stays free of pydantic at import
    from ascend_hybrid.spec.api import Model

MODEL_PRESETS: dict[str, dict[str, int | None]] = {
    "tiny": {"layers": 24, "hidden": 128, "heads": 8, "ffnHidden": 512, "vocab": 512, "experts": 0, "topK": None},
    "gpt-1b": {"layers": 24, "hidden": 2048, "heads": 16, "ffnHidden": 8192, "vocab": 50304, "experts": 0, "topK": None},
    "moe-100b": {"layers": 64, "hidden": 5120, "heads": 40, "ffnHidden": 20480, "vocab": 64000, "experts": 8, "topK": 2},
}
CUSTOM_REQUIRED = ("layers", "hidden", "heads", "vocab")
# the experts each token is routed to where neither the spec nor the preset says (the trainer's default too)
DEFAULT_TOP_K = 2


def resolved_model(model: Model) -> dict[str, Any]:
    explicit = model.model_dump(by_alias=True, exclude={"preset"}, exclude_none=True)
    if model.preset == "custom":
        base: dict[str, Any] = {"experts": 0, "topK": DEFAULT_TOP_K}
        if "hidden" in explicit:
            base["ffnHidden"] = 4 * explicit["hidden"]
    else:
        base = dict(MODEL_PRESETS[model.preset])
    return {"preset": model.preset, **base, **explicit}
