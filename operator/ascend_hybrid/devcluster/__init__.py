"""The simulated Ascend cluster for development, tests and benchmarks.

A real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, built by
`ascend_hybrid.devcluster.controlplane.toolchain`) run by kwokctl's binary runtime, with kwok-managed Ascend nodes (`nodes`), kwok stages
for pod outcomes and node faults (`ascend_hybrid/sim/kwok-stages.yaml`), and a simulated device plugin process
(`deviceplugin`). Lifecycle in `cluster`, CLI in `cli`.
"""
