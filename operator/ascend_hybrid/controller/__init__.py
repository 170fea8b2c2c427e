"""The shell of the operator: the only code that does I/O or owns threads (kopf handlers, reconcile workers,
the Kubernetes client, telemetry readers, metrics)."""
