"""The shell of the operator: the only code that does I/O or owns threads (kopf handlers, reconcile workers,
the Kubernetes client, telemetry readers, metrics).

- main: `ascend-hybrid run`, the composition root (settings → Kube, Controller, loops, kopf); hardening wires
  leader election (leader), authenticated metrics (metrics_auth) and NetworkPolicies; settings holds every tunable.
- handlers: the only kopf decorators; they index or enqueue, nothing more.
- loop: the Controller — the workers' reconcile pass (observe, `decide()`, act through kube); records holds what
  it keeps per job and the watched stores; workqueue its keyed, delayed queue; onepod a one-pod job's placement
  written with its start's next status write.
- roles: what each part below needs of the Controller, one Protocol per part (no part imports loop).
- placing: a gang or replacement placed under the one placement lock; children: the job's Services, ConfigMaps,
  NetworkPolicy and launcher grants written and repaired.
- listwatch: list + watch into a store; podwatch (the jobs' pods) and clusterwatch (Nodes, deviceinfo ConfigMaps,
  plugin DaemonSets) are built on it.
- kube: the only module that talks to the API; refused: the errors no retry fixes.
- telemetry (status.training, status.utilization), observed (the cluster's observed efficiency), metrics and logs:
  what the operator reads off the trainers and publishes.
"""
