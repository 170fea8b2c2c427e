"""The reconcile decision (core): `decision.decide(Observed) → Decision`, a pass of named steps; the steps of a
queued job (`queue_steps`), of a failure (`failure_steps`) and of telemetry (`telemetry_steps`); `actions` — one
frozen type per thing the shell must do; `strategy` — the planner in the job's life (auto jobs, status.plan);
`placement_record` — what a placement outcome writes into status."""
