"""The gang (core): `layout` — ranks, parallel groups and pods as MindSpore forms them; `inventory` — Ascend nodes and
their free chips from plain objects; `placement` — all-or-nothing topology-aware placement; `backlog` — the oldest-
first queue of jobs waiting for chips; `ranktable` — the HCCL rank table; `render` (+ `templates/`) — the child
manifests; `summary` — placements and layouts described for people."""
