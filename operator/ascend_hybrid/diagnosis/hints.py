"""What to change, per cause (pure): the seed's troubleshooting table (seed §5.5, docs/design.md §11) and the HCCL
guide, written against this CRD's fields, with the job's own numbers where the operator knows them. The planner
evaluates the job's own strategy for the out-of-memory hint (its memory prediction per NPU) and the straggler check
(its step time)."""

from __future__ import annotations

from ascend_hybrid.contracts.ascend import DEVICE_ANNOTATION, DEVICEINFO_PREFIX
from ascend_hybrid.contracts.names import RANK_TABLE_FILE, rank_table_config_map
from ascend_hybrid.diagnosis.failures import Failure
from ascend_hybrid.planner import hardware, search
from ascend_hybrid.planner.hardware import GIB
from ascend_hybrid.spec.resolved import ResolvedJob


def prediction(resolved: ResolvedJob) -> search.Evaluation | None:
    """The planner's evaluation of exactly this job's strategy on its chip's built-in profile; None when the
    planner cannot evaluate it (a pod larger than the profile's node)."""
    try:
        return search.evaluate_job(resolved, hardware.builtin(resolved.chip))
    except (search.PlanError, hardware.HardwareError, ValueError, KeyError):
        return None


def memory_prediction(resolved: ResolvedJob, evaluation: search.Evaluation | None) -> str:
    if evaluation is None:
        return "the planner could not evaluate this strategy (`ascend-hybrid plan` says why)"
    used, usable = evaluation.memory.total / GIB, evaluation.usable / GIB
    verdict = "it does not fit" if used > usable else "the rest is activations and workspace it does not model"
    return (f"the planner's prediction was {used:.1f} GiB of {usable:.1f} GiB usable per {resolved.chip} NPU "
            f"({verdict}; `ascend-hybrid plan` ranks strategies that fit)")


def _oom(failure: Failure, resolved: ResolvedJob, evaluation: search.Evaluation | None) -> str:
    if failure.host_oom:
        return ("the kernel killed the container for host memory: raise spec.template.resources.limits.memory "
                "(and requests), or lower the per-pod batch (more parallelism.data pods, smaller "
                "training.globalBatchSize)")
    return ("enable training.recompute (selective or full), raise parallelism.microBatches (now "
            f"{resolved.micro_batches}) or parallelism.pipeline (now {resolved.pipeline}), or enable "
            f"training.optimizerShard; {memory_prediction(resolved, evaluation)}")


def hint(failure: Failure, resolved: ResolvedJob, evaluation: search.Evaluation | None = None) -> str:
    """One paragraph: the fix for this failure of this job."""
    spec, job = resolved.spec, resolved.name
    node = failure.node or "its node"
    table = {
        "HCCLConnectTimeout": (
            f"HCCL could not build its links within spec.hccl.connectTimeoutSeconds="
            f"{spec.hccl.connect_timeout_seconds}: check that hccl.json (ConfigMap {rank_table_config_map(job)}) "
            "maps each pod's IP and device_id right, that the NPU network is reachable between the nodes "
            "(hccn_tool -i <device> -ping, firewalls, spec.hccl.socketIfname), and raise connectTimeoutSeconds for "
            f"large gangs; the job restarts without {node}"),
        "HCCLExecTimeout": (
            f"a collective waited more than spec.hccl.execTimeoutSeconds={spec.hccl.exec_timeout_seconds} for a peer: "
            "a rank was slow or gone (the other pods' messages, npu-smi and the node's health say which); raise "
            "execTimeoutSeconds when long collectives are expected, and keep tensor-parallel groups inside a node "
            f"(HCCL bandwidth); the job restarts without {node}"),
        "DeviceOutOfMemory": _oom(failure, resolved, evaluation),
        "NumericalDivergence": (
            f"the loss or the gradient norm diverged{f' at step {failure.step}' if failure.step is not None else ''}: "
            f"lower training.learningRate (now {spec.training.learning_rate:g}) and clip the gradients with "
            f"training.gradientClipNorm (now {spec.training.gradient_clip_norm:g}; e.g. 1.0); watch "
            "ascend_trainer_grad_norm. A loss that drifts from a single-NPU run points at a wrong split instead: "
            "compare with `ascend-hybrid-trainer local`"),
        "RankTableTimeout": (
            f"the trainer gave up waiting for hccl.json (ConfigMap {rank_table_config_map(job)}) to be completed: "
            "the RankTableReady condition names the pods it waited for; check that the Ascend device plugin "
            "annotated them with their devices"),
        "RankTableRejected": (
            f"HCCL refused the rank table hccl.json (ConfigMap {rank_table_config_map(job)}, mounted at "
            f"{RANK_TABLE_FILE}) ({failure.detail[:300]}): a repeated server_id or device_ip, or a device_ip that is "
            "not an IP address. Check it with `ascend-hybrid ranktable -f JOB --pods PODS` against the pods' "
            f"{DEVICE_ANNOTATION} annotations (the device plugin's server_id and device_ip; `hccn_tool -i <device> "
            "-ip -g` on the node); a restart builds the same table, so the job fails"),
        "ConfigError": (
            f"the trainer refused its configuration ({failure.detail[:300]}): fix the spec or the image as it says "
            "(a trainer without MindSpore needs `pip install 'ascend-hybrid[trainer]'` or the trainer image). A "
            "restart cannot help, and no node is to blame"),
        "DataError": (f"the training data could not be read or does not fit the model ({failure.detail[:300]}): "
                      "check the dataset volume and path, its token ids against spec.model.vocab, and its shape "
                      "against training.seqLength"),
        "PeerFailed": ("this rank ended because another rank died first, and no pod said why: read the other "
                       "pods' logs (`kubectl logs -l hybrid.ascend.dev/job=" + job + "`)"),
        "NodeNotReady": (f"{node} stopped reporting Ready: the job restarts without it, and this does not count "
                         "against backoffLimit (status.disruptions); check the node's kubelet, power and network"),
        "ChipUnhealthy": (f"the Ascend device plugin lists chip {', '.join(map(str, failure.chips)) or '?'} of "
                          f"{node} as unusable (ConfigMap {DEVICEINFO_PREFIX}{failure.node or '<node>'} in "
                          "kube-system): the job restarts without the node, not counted against backoffLimit; "
                          "check `npu-smi info` and the fault codes there"),
        "PodDeleted": ("a pod of the running gang was deleted by someone else (kubectl delete, an eviction, a "
                       "preemption); MindSpore cannot replace one rank, so the whole gang restarts"),
        "SchedServiceChanged": (f"the Service {job}-sched was deleted and came back with another ClusterIP, so the "
                                "MS_SCHED_HOST the pods were started with leads nowhere: the gang restarts with the new "
                                "address. Keep the operator's Services (owned by the job) out of cleanup scripts"),
    }
    return table.get(failure.cause, (
        f"see `kubectl logs {failure.pod or '<pod>'}`: its last error line is in the message; a rule in "
        "spec.runPolicy.failurePolicy can say what this exit code means"))
