"""What the simulated device plugin shows of itself in the cluster: a DaemonSet shaped as MindCluster ships its Ascend
device plugin (component/ascend-device-plugin/build/ascendplugin.yaml and ascendplugin-volcano.yaml: kube-system,
`ascend-device-plugin-daemonset`, nodeSelector `workerselector: dls-worker-node`, the plugin's flags in `args`).

Its pods are the simulation's plugin process (deviceplugin/plugin.py): the cluster's controller-manager runs without
the DaemonSet controller (controlplane/kwokctl.py), so no pod is made from it. A reader that tells a node's plugin
mode from the DaemonSet's arguments, as an operator on a real cluster does, sees the mode the cluster runs.
"""

from __future__ import annotations

from ascend_hybrid.devcluster.deviceplugin.allocation import VOLCANO

NAMESPACE = "kube-system"
NAME = "ascend-device-plugin-daemonset"
POD_LABELS = {"name": "ascend-device-plugin-ds"}
IMAGE = "ascend-k8sdeviceplugin:v7.3.0"  # a name only: nothing pulls it


def plugin_arguments(mode: str, period: float) -> str:
    """The container's one shell argument, as MindCluster's manifests write it."""
    flags = ["device-plugin", f"-volcanoType={'true' if mode == VOLCANO else 'false'}", "-presetVirtualDevice=true",
             f"-listWatchPeriod={period:g}", "-logFile=/var/log/mindx-dl/devicePlugin/devicePlugin.log",
             "-logLevel=0"]
    return " ".join(flags)


def daemonset_manifest(mode: str, period: float) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"sim.hybrid.ascend.dev/simulated": "true"}},
        "spec": {
            "selector": {"matchLabels": dict(POD_LABELS)},
            "template": {
                "metadata": {"labels": dict(POD_LABELS)},
                "spec": {
                    "nodeSelector": {"workerselector": "dls-worker-node"},
                    "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "device-plugin-01",
                        "image": IMAGE,
                        "command": ["/bin/bash", "-c", "--"],
                        "args": [plugin_arguments(mode, period)],
                    }],
                },
            },
        },
    }
