"""A running job observed (core): `progress` turns telemetry samples into status.training and status.utilization;
`anomalies` folds them into the LoadImbalanced, Straggling and TrainingStalled conditions; `slowness` scores each
rank's compute against its peers' and names a slow node (SlowNode)."""
