"""The simulated nodes as API objects: create them (with their deviceinfo ConfigMaps), wait for them, fault them."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from kubernetes import client

from ascend_hybrid.devcluster.kube.client import create_if_absent, raw_list, read_raw, with_retries
from ascend_hybrid.devcluster.kube.waiting import wait_until
from ascend_hybrid.devcluster.nodes.manifests import (
    DEVICEINFO_KEY,
    DEVICEINFO_NAMESPACE,
    NOT_READY_LABEL,
    SIMULATED_LABEL,
    STRADDLE_RINGS_LABEL,
    UNREADABLE_IPS_ANNOTATION,
    SimNode,
    chip_name,
    deviceinfo_configmap,
    deviceinfo_data,
    deviceinfo_name,
    node_manifest,
    profile,
    reported_unhealthy,
    sim_node_from_manifest,
)
from ascend_hybrid.devcluster.telemetry import coupled

CREATE_WORKERS = 8
NOT_READY_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def simulated_nodes(core: client.CoreV1Api) -> list[dict]:
    listing = with_retries(lambda: raw_list(core.list_node, label_selector=f"{SIMULATED_LABEL}=true"), "list nodes")
    return listing["items"]


def existing_sim_nodes(core: client.CoreV1Api) -> dict[int, SimNode]:
    found = (sim_node_from_manifest(n) for n in simulated_nodes(core))
    return {n.index: n for n in found if n is not None}


def ready_status(node: dict) -> str | None:
    """The Ready condition's status ("True", "False", "Unknown"), None before the node has one."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status")
    return None


def create_nodes(core: client.CoreV1Api, nodes: list[SimNode]) -> int:
    """Creates the missing Nodes and deviceinfo ConfigMaps; existing ones stay as they are (faults survive
    `up`). Returns how many Nodes were created."""
    now = int(time.time())

    # The manifests are dicts: the client's validate_call builds its models from them.
    def create(node: SimNode) -> bool:
        created = create_if_absent(lambda: core.create_node(cast(client.V1Node, node_manifest(node))),
                                   f"node {node.name}")
        create_if_absent(lambda: core.create_namespaced_config_map(
            DEVICEINFO_NAMESPACE, cast(client.V1ConfigMap, deviceinfo_configmap(node, now=now))),
            f"configmap {deviceinfo_name(node.name)}")
        return created

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        return sum(pool.map(create, nodes))


def wait_nodes_ready(core: client.CoreV1Api, names: set[str], timeout: float) -> None:
    """Waits until every named node reports Ready=True (nodes held NotReady on purpose are left out)."""
    def pending() -> list[str]:
        return sorted(n["metadata"]["name"] for n in simulated_nodes(core)
                      if n["metadata"]["name"] in names and ready_status(n) != "True"
                      and (n["metadata"].get("labels") or {}).get(NOT_READY_LABEL) != "true")

    def all_ready() -> bool:
        missing = names - {n["metadata"]["name"] for n in simulated_nodes(core)}
        return not missing and not pending()

    wait_until(all_ready, timeout, f"{len(names)} nodes to turn Ready", interval=0.25,
               describe=lambda: f"not Ready: {', '.join(pending()[:10]) or 'none'}")


def set_node_ready(core: client.CoreV1Api, node_name: str, ready: bool, timeout: float = 60.0) -> None:
    """Holds a node NotReady (a label the kwok stages obey) or lets it recover, then waits for the condition."""
    label = None if ready else "true"
    with_retries(lambda: core.patch_node(node_name, {"metadata": {"labels": {NOT_READY_LABEL: label}}}),
                 f"label node {node_name}")
    want = "True" if ready else "False"

    def settled() -> bool:
        node = read_raw(core.read_node, node_name)
        if ready_status(node) != want:
            return False
        # Back to Ready means schedulable again: the node lifecycle controller has lifted its taints too.
        taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
        return not ready or not taints & NOT_READY_TAINTS

    wait_until(settled, timeout, f"node {node_name} to report Ready={want}"
               + (" and lose its not-ready taints" if ready else ""))


def set_chip_health(core: client.CoreV1Api, node_name: str, chip_id: int, healthy: bool) -> frozenset[int]:
    """Adds or removes one chip in the node's deviceinfo ConfigMap Unhealthy list; returns the new list."""
    node = sim_node_from_manifest(read_raw(core.read_node, node_name))
    if node is None:
        raise ValueError(f"{node_name} is not a simulated Ascend node")
    chips = profile(node.chip).chips_per_node
    if not 0 <= chip_id < chips:
        raise ValueError(f"{node_name} has chips 0..{chips - 1}; there is no {chip_name(chip_id)}")
    name = deviceinfo_name(node_name)
    configmap = read_raw(core.read_namespaced_config_map, name, DEVICEINFO_NAMESPACE)
    unhealthy = set(reported_unhealthy(configmap.get("data")))
    if healthy:
        unhealthy.discard(chip_id)
    else:
        unhealthy.add(chip_id)
    data = deviceinfo_data(node, frozenset(unhealthy), int(time.time()))
    # Keep whatever an operator separated by hand; only DeviceInfoCfg is ours to rewrite.
    patch = {"data": {DEVICEINFO_KEY: data[DEVICEINFO_KEY]}}
    with_retries(lambda: core.patch_namespaced_config_map(name, DEVICEINFO_NAMESPACE, patch),
                 f"patch configmap {name}")
    return frozenset(unhealthy)


def set_device_ip_readable(core: client.CoreV1Api, node_name: str, chip_id: int, readable: bool) -> frozenset[int]:
    """Marks one chip's IP unreadable (or readable again) for the device plugin: pods it allocates afterwards get
    `"device_ip": "-1"` for that chip. Returns the node's unreadable chips."""
    node = sim_node_from_manifest(read_raw(core.read_node, node_name))
    if node is None:
        raise ValueError(f"{node_name} is not a simulated Ascend node")
    chips = profile(node.chip).chips_per_node
    if not 0 <= chip_id < chips:
        raise ValueError(f"{node_name} has chips 0..{chips - 1}; there is no {chip_name(chip_id)}")
    unreadable = set(node.unreadable_ips) - {chip_id} if readable else set(node.unreadable_ips) | {chip_id}
    value = ",".join(map(str, sorted(unreadable))) or None  # None: the merge patch removes the annotation
    with_retries(lambda: core.patch_node(node_name, {"metadata": {"annotations": {UNREADABLE_IPS_ANNOTATION: value}}}),
                 f"annotate node {node_name}")
    return frozenset(unreadable)


def set_straddle_rings(core: client.CoreV1Api, node_name: str, straddle: bool) -> None:
    """Makes the kubelet's chip choice on a 910A node take chips from both HCCS rings whenever the free chips allow
    it (or choose freely again): what a kubelet may do by chance, forced for a test."""
    node = sim_node_from_manifest(read_raw(core.read_node, node_name))
    if node is None:
        raise ValueError(f"{node_name} is not a simulated Ascend node")
    value = "true" if straddle else None  # None: the merge patch removes the label
    with_retries(lambda: core.patch_node(node_name, {"metadata": {"labels": {STRADDLE_RINGS_LABEL: value}}}),
                 f"label node {node_name}")


def set_slowness(core: client.CoreV1Api, node_name: str, compute: float | None = None,
                 link: tuple[str, float] | None = None, clear: bool = False, now: float | None = None) -> dict[str, str]:
    """A slow node (its chips compute `compute` times slower), a slow link to a peer (its bandwidth divided by the
    factor), or both cleared: appended to the node's fault histories (telemetry/coupled.py), which the simulated
    telemetry and the process runtime's throttle read. Returns the node's two annotations."""
    node = read_raw(core.read_node, node_name)
    if sim_node_from_manifest(node) is None:
        raise ValueError(f"{node_name} is not a simulated Ascend node")
    moment = time.time() if now is None else now
    annotations = node["metadata"].get("annotations") or {}
    compute_text = annotations.get(coupled.SLOW_COMPUTE_ANNOTATION)
    links = coupled.parse_links(annotations.get(coupled.SLOW_LINKS_ANNOTATION))
    if compute is not None or clear:
        compute_text = coupled.appended(compute_text, 1.0 if clear else float(compute or 1.0), moment)
    if link is not None:
        peer, factor = link
        if sim_node_from_manifest(read_raw(core.read_node, peer)) is None:
            raise ValueError(f"{peer} is not a simulated Ascend node")
        links[peer] = (*links.get(peer, ()), (moment, max(factor, 1.0)))
    if clear:
        links = {peer: (*history, (moment, 1.0)) for peer, history in links.items()}
    patch = {coupled.SLOW_COMPUTE_ANNOTATION: compute_text or None,
             coupled.SLOW_LINKS_ANNOTATION: coupled.links_text(links) or None}
    with_retries(lambda: core.patch_node(node_name, {"metadata": {"annotations": patch}}),
                 f"annotate node {node_name}")
    return {key: value for key, value in patch.items() if value}
