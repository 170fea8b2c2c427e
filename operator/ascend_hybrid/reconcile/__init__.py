"""The reconcile decision (core): `decision` — `decide(Observed) → Decision`, a pass that reads as a dozen named
steps; `state` — Observed, Decision and the Pass the steps share (its helpers write conditions, the phase, requeues,
the terminal outcomes); the steps of a queued job (`queue_steps`), of a failure (`failure_steps`), of the recovery ladder
(`recovery_steps`), of elastic data parallelism (`elastic_steps`: shrink when a lost node leaves no room, grow back),
of telemetry (`telemetry_steps`), of the goodput account (`goodput_steps`), of the auto checkpoint interval
(`checkpoint_steps`), of slow nodes (`slowness_steps`) and of a job Volcano schedules (`volcano_steps`: its
PodGroup, Volcano's word while it holds the gang, where it bound the pods against the plan), each a typed function
of the Pass; `actions` — one frozen type per thing the shell must do;
`membership` — which pod runs as which index of the attempt (pods a shrink or growth kept) and the world its
launcher is told; `strategy` — the planner in the job's life (auto jobs, status.plan); `placement_record` — what a placement outcome
writes into status; `status_edge` — the status parsed once into its typed model and dumped once for the shell."""
