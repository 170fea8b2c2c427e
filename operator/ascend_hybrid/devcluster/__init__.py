"""The simulated Ascend cluster for development, tests and benchmarks.

Subsystems, one folder each: `controlplane/` (the toolchain that builds etcd, kube-* and kwok from Go modules,
kwokctl's binary runtime, ports, and the kwok stages that give pods their outcomes), `kube/` (client, informer,
process control, waiting), `nodes/` (Ascend Node and deviceinfo manifests, and the fleet through the API),
`deviceplugin/` (the simulated Ascend device plugin), `runtime/` (the process runtime: a kubelet for pods that
run real processes), `telemetry/` (simulated trainer and npu-exporter metrics, Prometheus), `kueue/` and
`volcano/` (a real Kueue or Volcano beside the simulation, and Volcano's Ascend plugin stood in for) and `testing/`
(helpers used only by tests and benchmarks). `helpers.py` runs the helper processes; `cluster.py` brings a
named cluster up and down; `cli.py` is `ascend-hybrid dev-cluster`.

It imports nothing of the operator: its own copy of the Ascend wire contract (labels, annotations, deviceinfo)
is the oracle the operator's `ascend.py` is tested against.
"""
