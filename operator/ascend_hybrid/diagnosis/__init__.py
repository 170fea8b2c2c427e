"""Why an attempt broke and what follows (core): `failures` finds and classifies the first failure of a gang;
`policy` judges it (spec.runPolicy.failurePolicy, then the default actions per cause); `hints` says what to change;
`refusals` holds the apiserver's refusals of the job's own writes as observations; `recovery` — the recovery
ladder (RestartRanks, ReplacePod, RestartGang: which rung a cause starts at, escalation, bounds), the incident
ledger and the launchers' reports; `goodput` — the wall time split into buckets that add up to it (status.goodput
and status.goodputAccount); `checkpointing` — the checkpoint interval of everySteps: auto (Daly's optimum from the
measured save cost and the failure rate the operator sees)."""
