"""Rank layout: degrees → ranks, parallel groups and pods, formed the way MindSpore forms its groups.

World W = data·tensor·pipeline·context, stage size S = W/pipeline. Within a stage, TP ranks are adjacent, CP
ranks stride by `tensor` and DP ranks by tensor·context (the densest traffic on the nearest ranks: TP every
matmul, CP every attention, DP once per step); stages are contiguous blocks. Pod p holds ranks [p·k, (p+1)·k), so
with `tensor` dividing k no TP group ever crosses a pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from ascend_hybrid.spec.resolved import ResolvedJob

GROUP_KINDS = ("tensor", "data", "pipeline", "expert")


@dataclass(frozen=True)
class RankCoordinates:
    rank: int
    stage: int
    data: int
    tensor: int
    expert: int
    pod: int
    local: int
    context: int = 0


@dataclass(frozen=True)
class PodRanks:
    index: int
    first: int
    last: int

    @property
    def ranks(self) -> range:
        return range(self.first, self.last + 1)


@dataclass(frozen=True)
class Layout:
    data: int
    tensor: int
    pipeline: int
    per_pod: int
    expert: int = 1
    expert_placement: str = "dataParallel"
    context: int = 1

    def __post_init__(self) -> None:
        if self.world_size % self.per_pod or self.per_pod % self.tensor:
            raise ValueError(f"perPod={self.per_pod} must divide world={self.world_size} and tensor={self.tensor} must divide perPod")
        group_size = self.per_pod if self.expert_placement == "intraNode" else self.data
        if group_size % self.expert:
            raise ValueError(f"expert={self.expert} must divide {group_size} ({self.expert_placement})")

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def stage_size(self) -> int:
        return self.data * self.tensor * self.context

    @property
    def replica_stride(self) -> int:
        """Ranks between neighbouring DP ranks: a TP group per CP rank."""
        return self.tensor * self.context

    @property
    def pod_count(self) -> int:
        return self.world_size // self.per_pod

    def coordinates(self, rank: int) -> RankCoordinates:
        if not 0 <= rank < self.world_size:
            raise IndexError(f"rank {rank} outside world of {self.world_size}")
        stage, within = divmod(rank, self.stage_size)
        data_rank, replica = divmod(within, self.replica_stride)
        context_rank, tensor_rank = divmod(replica, self.tensor)
        pod, local = divmod(rank, self.per_pod)
        expert_rank = local % self.expert if self.expert_placement == "intraNode" else data_rank % self.expert
        return RankCoordinates(rank, stage, data_rank, tensor_rank, expert_rank, pod, local, context_rank)

    @cached_property
    def pods(self) -> tuple[PodRanks, ...]:
        k = self.per_pod
        return tuple(PodRanks(p, p * k, (p + 1) * k - 1) for p in range(self.pod_count))

    def tensor_groups(self) -> list[list[int]]:
        t = self.tensor
        return [list(range(start, start + t)) for start in range(0, self.world_size, t)]

    def data_groups(self) -> list[list[int]]:
        s, r = self.stage_size, self.replica_stride
        return [[stage * s + d * r + offset for d in range(self.data)] for stage in range(self.pipeline)
                for offset in range(r)]

    def context_groups(self) -> list[list[int]]:
        """The ranks that split one sequence: stride tensor inside one DP replica of one stage."""
        s, r, t = self.stage_size, self.replica_stride, self.tensor
        return [[stage * s + d * r + c * t + tr for c in range(self.context)] for stage in range(self.pipeline)
                for d in range(self.data) for tr in range(t)]

    def pipeline_groups(self) -> list[list[int]]:
        s = self.stage_size
        return [[stage * s + i for stage in range(self.pipeline)] for i in range(s)]

    def expert_groups(self) -> list[list[int]]:
        e = self.expert
        if self.expert_placement == "intraNode":
            return [list(range(start, start + e)) for start in range(0, self.world_size, e)]
        s, r = self.stage_size, self.replica_stride
        return [[stage * s + (block * e + j) * r + offset for j in range(e)]
                for stage in range(self.pipeline) for block in range(self.data // e) for offset in range(r)]

    def groups(self) -> dict[str, list[list[int]]]:
        out = {"tensor": self.tensor_groups(), "data": self.data_groups(),
               "pipeline": self.pipeline_groups(), "expert": self.expert_groups()}
        if self.context > 1:
            out["context"] = self.context_groups()
        return out

    def pods_of(self, ranks: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({rank // self.per_pod for rank in ranks}))

    def stage_pods(self) -> list[tuple[int, ...]]:
        """The pods of each pipeline stage (a stage's pods are contiguous)."""
        return [self.pods_of(range(stage * self.stage_size, (stage + 1) * self.stage_size))
                for stage in range(self.pipeline)]

    def placement_groups(self) -> tuple[tuple[int, ...], ...]:
        """Pod sets to keep close, in priority order: pipeline stages, then DP and EP groups spanning pods.

        A stage's pods are contiguous, and DP/EP groups live inside one stage, so listing a DP/EP pod set only
        adds information when it is smaller than its stage.
        """
        stage_pods = self.stage_pods()
        seen: set[tuple[int, ...]] = set()
        ordered: list[tuple[int, ...]] = []
        for pods in stage_pods:
            if len(pods) > 1 and pods not in seen:
                seen.add(pods)
                ordered.append(pods)
        if self.expert > 1 and self.expert_placement == "dataParallel":
            for group in self.expert_groups()[:: self.replica_stride]:
                pods = self.pods_of(group)
                if len(pods) > 1 and pods not in seen:
                    seen.add(pods)
                    ordered.append(pods)
        return tuple(ordered)

    def tier_of(self, group: list[int], pod_nodes: tuple[str, ...] | None = None,
                node_domains: dict[str, str | None] | None = None) -> str:
        """Where a group communicates: inside one pod, one node, one tier domain (rack) or across the cluster."""
        pods = self.pods_of(group)
        if len(pods) == 1:
            return "pod"
        if pod_nodes is None:
            return "pods"
        nodes = {pod_nodes[p] for p in pods}
        if len(nodes) == 1:
            return "node"
        domains = {(node_domains or {}).get(node) for node in nodes}
        if len(domains) == 1 and None not in domains:
            return "rack"
        return "cluster"


def from_resolved(resolved: ResolvedJob) -> Layout:
    return Layout(data=resolved.data, tensor=resolved.tensor, pipeline=resolved.pipeline,
                  per_pod=resolved.per_pod, expert=resolved.expert, expert_placement=resolved.expert_placement,
                  context=resolved.context)


def stage_racks(layout: Layout, pod_nodes: tuple[str, ...], node_domains: Mapping[str, str | None]) -> int:
    """The racks (first-tier domains) each pipeline stage spans, summed over the stages: what a placement keeps
    smallest after the nodes (design §5)."""
    return sum(len({node_domains.get(pod_nodes[p]) for p in stage}) for stage in layout.stage_pods())


def tensor_groups_node_local(layout: Layout, pod_nodes: tuple[str, ...]) -> str:
    groups = layout.tensor_groups()
    local = sum(1 for group in groups if len({pod_nodes[rank // layout.per_pod] for rank in group}) == 1)
    return f"{local}/{len(groups)}"
