"""CEL views of a job's resolved values, for the CRD's x-kubernetes-validations that rules.py writes beside each
Python rule. The expressions read `self` = the spec; the apiserver's cost estimator shapes how they are written."""

from __future__ import annotations

import re

from ascend_hybrid.contracts.chips import cel_chips_per_node
from ascend_hybrid.spec.models import DEFAULT_TOP_K, MODEL_PRESETS

# The degrees have no schema defaults (an auto job leaves them unset), so every CEL rule reads them through a
# has() view with rules.resolve's default; Rule rewrites its expressions to those views.
_CEL_DEGREE_DEFAULTS = {"data": "1", "tensor": "1", "pipeline": "1", "expert": "1",
                        "expertPlacement": "'dataParallel'", "virtualPipelineStages": "1", "context": "1"}
_CEL_DEGREE = re.compile(r"(?<!has\()self\.parallelism\.(" + "|".join(_CEL_DEGREE_DEFAULTS) + r")\b")


def cel_degrees(expression: str | None) -> str | None:
    if expression is None:
        return None
    return _CEL_DEGREE.sub(lambda m: f"(has(self.parallelism.{m[1]}) ? self.parallelism.{m[1]} : "
                                     f"{_CEL_DEGREE_DEFAULTS[m[1]]})", expression)


# CEL views of resolved values; the CRD defaults every object, so only optional scalars need has().
CEL_PER_POD = f"(has(self.npu.perPod) ? self.npu.perPod : {cel_chips_per_node('self.npu.chip')})"
CEL_MICRO = "(has(self.parallelism.microBatches) ? self.parallelism.microBatches : self.parallelism.pipeline)"
CEL_AUTO = "(has(self.parallelism.auto) && self.parallelism.auto)"
# An auto job's world is its budget; the rule that needs it (auto needs world) names a missing one.
CEL_WORLD = (f"({CEL_AUTO} ? (has(self.parallelism.world) ? self.parallelism.world : 0) : "
              "self.parallelism.data * self.parallelism.tensor * self.parallelism.pipeline * self.parallelism.context)")


def cel_model(field: str) -> str:
    presets = ", ".join(f"'{preset}': {values[field] or 0}" for preset, values in MODEL_PRESETS.items())
    return f"(has(self.model.{field}) ? self.model.{field} : {{{presets}}}[self.model.preset])"


def cel_model_or_zero(field: str) -> str:
    """Like cel_model, with custom's default of 0 for fields (experts) that custom may leave out."""
    presets = ", ".join(f"'{preset}': {values[field] or 0}" for preset, values in MODEL_PRESETS.items())
    return f"(has(self.model.{field}) ? self.model.{field} : {{{presets}, 'custom': 0}}[self.model.preset])"


def cel_top_k() -> str:
    """The topK a job routes with: the spec's, else its preset's, else the default (custom, or a dense preset)."""
    presets = ", ".join(f"'{preset}': {values['topK'] or DEFAULT_TOP_K}" for preset, values in MODEL_PRESETS.items())
    return f"(has(self.model.topK) ? self.model.topK : {{{presets}, 'custom': {DEFAULT_TOP_K}}}[self.model.preset])"


def cel_known(field: str) -> str:
    return f"(has(self.model.{field}) || self.model.preset != 'custom')"


def cel_format(template: str, *arguments: str) -> str:
    """A CEL messageExpression via the strings `format` function: the apiserver's cost estimator refuses
    `string(int)` concatenations (unbounded size), but accepts format."""
    return f"{cel_string(template)}.format([{', '.join(arguments)}])"


def cel_string(text: str) -> str:
    """A CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_full_match(expression: str, pattern: str) -> str:
    """`expression` matches the whole of `pattern` (CEL's matches() searches, as RE2 does, so it is anchored)."""
    return f"{expression}.matches({cel_string('^(?:' + pattern + ')$')})"
