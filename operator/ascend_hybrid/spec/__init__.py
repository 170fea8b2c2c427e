"""The AscendHybridJob API and its rules (core). `api` — the pydantic models, the CRD's single source; `models` —
model presets; `causes` — failure causes and policy action names; `resolved` — the job with every default applied
(ResolvedJob); `rules`, `field_rules`, `cel` — each cross-field rule once in Python and CEL with one message;
`problems` — pydantic's and Kubernetes' errors worded as the apiserver words them; `conditions` — the job's
conditions set and read on its typed status; `crd` — the generated CRD;
`k8s_validation/` — Kubernetes' own field rules (names, labels, quantities, images, pod fields)."""
