"""The AscendHybridJob operator. The package is layered; each sub-package's own docstring is its map.

The pure core (plain data in, plain data out; no Kubernetes I/O, no threads), bottom layer first — each imports only
the layers before it (tests/contract/test_layering.py):

- `contracts/`  wire facts shared with the outside: MindCluster's and the device plugin's names, the chip table,
                Kueue's pod-group contract, child names and labels, conditions, what a Pod or Node says.
- `spec/`       the API: pydantic models (the CRD's one source), the resolved job, the rules in Python and CEL,
                Kubernetes' own field rules, the generated CRD.
- `gang/`       rank layout, node inventory, gang placement, the placement queue, the HCCL rank table, the child
                manifests and their templates.
- `planner/`    the strategy planner: hardware, workload, memory, step time, search, explanations, the SVG.
- `monitoring/` telemetry samples into status.training/utilization, and the live anomaly conditions.
- `diagnosis/`  why an attempt broke (failures), what the failure policy does about it, hints, API refusals.
- `reconcile/`  the decision: observed job and children → actions and status, in named steps.

The shell: `controller/` (the operator: kopf handlers, watches, the reconcile loop, every API call), `cli/` (the
`ascend-hybrid` command), `devtools/` (generators and demos that need a checkout) and `devcluster/` (the simulated
Ascend cluster, which imports nothing of the operator: it is the independent oracle of the wire facts).
"""
