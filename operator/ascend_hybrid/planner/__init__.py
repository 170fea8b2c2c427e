"""The strategy planner (core): which DP/TP/PP/CP/EP split, micro-batches, recompute and sharding fit a model on a
world of NPUs, and how fast. `hardware` — chip and link profiles (built-in and user files); `workload` — the model
and batch a job trains, and a Strategy; `compute` — each micro-batch's FLOPs, matmul and vector work, priced by
shape (Cube alignment included); `calibration` — the cost model's constants fitted on published Ascend runs;
`observed` — what the cluster's own jobs measured, folded per hardware profile into the factor later plans use
(the operator's ConfigMap; `plan --learn/--explain`, spec.npu.useObservedEfficiency); `memory` — per-device
memory (ZeRO states, activations); `timing` — step time per link tier; `search` — every candidate the rules accept,
ranked; `explain` — why, in words and JSON; `svg` — the plan as a picture. docs/planner.md has the formulas, their
sources and the calibration table."""
