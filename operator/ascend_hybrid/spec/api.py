"""The AscendHybridJob API: pydantic models of spec and status, the single source of the CRD.

Field descriptions double as `kubectl explain` text, so they are written for users.
Cross-field rules live in `rules.py`, which also emits them as CEL for the CRD.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from ascend_hybrid.contracts.ascend import RACK_LABEL, RESOURCE
from ascend_hybrid.contracts.chips import CHIP_NAMES, CHIPS, MAX_CHIPS_PER_POD
from ascend_hybrid.contracts.volcano import DEFAULT_QUEUE as DEFAULT_VOLCANO_QUEUE
from ascend_hybrid.contracts.volcano import SUPER_POD_CHIPS_PER_POD
from ascend_hybrid.spec.causes import ACTIONS, CAUSES, SOFTWARE_CAUSES
from ascend_hybrid.spec.k8s_validation import DNS1123_SUBDOMAIN_MAX, IMAGE_MAX, LABEL_KEY_MAX, LABEL_VALUE_MAX

VERSION = "v1alpha1"
KIND = "AscendHybridJob"
PLURAL = "ascendhybridjobs"
SINGULAR = "ascendhybridjob"
SHORT_NAMES = ("ahj",)
CATEGORIES = ("ascend",)

MAX_WORLD_SIZE = 65_536
MAX_DEGREE = 65_536
MAX_JOB_NAME = 50  # `<job>-a<attempt>-<index>` must stay a 63-character label
MAX_SEED = 2 ** 32 - 1  # the trainer seeds numpy's RandomState and MindSpore's set_seed, both 32-bit
MAX_TOPOLOGY_TIERS = 16
MAX_POLICY_RULES = 32  # bounds the CEL cost of the failure-policy rules
MAX_PIPELINE_LAYERS = 1024  # bounds the CEL cost of summing spec.parallelism.pipelineLayers
MAX_TEMPLATE_ANNOTATIONS = 256  # bounds the CEL cost of naming a reserved annotation key (spec/field_rules.py)

DEFAULT_TRAINER_IMAGE = "ascend-hybrid/trainer:0.1.0"
RAW_OBJECT: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


class ApiModel(BaseModel):
    # validate_default: defaults go through validation too, so use_enum_values turns them into plain strings
    # (an Enum default would print as `Chip.chip_910b` in messages and output).
    # use_attribute_docstrings: each field's description (the CRD's, `kubectl explain`'s) is the docstring under it.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              use_enum_values=True, validate_default=True, use_attribute_docstrings=True)


class ExpertPlacement(str, Enum):
    data_parallel = "dataParallel"
    intra_node = "intraNode"


# mypy reads Enum members only from a literal; these are computed from the chip table
Chip = Enum("Chip", {f"chip_{name.lower()}": name for name in CHIP_NAMES}, type=str)  # type: ignore[misc]
_CHIPS_PER_NODE_TEXT = ", ".join(f"{name} {spec.chips_per_node}" for name, spec in CHIPS.items())


class Preset(str, Enum):
    tiny = "tiny"
    gpt_1b = "gpt-1b"
    moe_100b = "moe-100b"
    custom = "custom"


class FfnType(str, Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


# `recompute` was a boolean before it named a kind; old manifests still say `true`/`false`. A structural schema
# cannot say "boolean or string" (no `type` may sit under anyOf), but a node without a type is structural when it
# preserves unknown fields (apiextensions' ValidateStructural exempts it), and its `enum` still refuses anything
# else at admission. CEL cannot see such a node, so no CEL rule may read it.
RECOMPUTE_SCHEMA = {"x-kubernetes-preserve-unknown-fields": True, "enum": ["none", "selective", "full", True, False]}


class PullPolicy(str, Enum):
    always = "Always"
    if_not_present = "IfNotPresent"
    never = "Never"


class CleanPodPolicy(str, Enum):
    running = "Running"
    all = "All"
    none = "None"


class AutoConstraints(ApiModel):
    max_pipeline: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Largest pipeline degree the planner may choose."""
    max_tensor: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Largest tensor degree the planner may choose."""
    expert_placement: ExpertPlacement | None = Field(None)
    """Only this expert placement (MoE models); default: either."""
    recompute: list[Recompute] | None = Field(None, min_length=1)
    """Recompute kinds the planner may choose (none, selective, full); default: any."""


class Parallelism(ApiModel):
    # No schema defaults on the degrees: an auto job must leave them unset (the planner chooses them), so the
    # defaults (1, dataParallel, microBatches = pipeline) are applied by rules.resolve instead.
    data: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Data-parallel degree (DP): model replicas that split the global batch. Default 1."""
    tensor: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Tensor-parallel degree (TP): ranks that split each layer's matrices; a TP group always sits inside one pod,
    hence one node. Default 1."""
    pipeline: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Pipeline-parallel degree (PP): stages the layers are cut into; each stage is a contiguous block of ranks.
    Default 1."""
    expert: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Expert-parallel degree (EP) for MoE layers; it does not add ranks, it partitions the experts inside DP or
    inside a pod. Default 1."""
    expert_placement: ExpertPlacement | None = Field(None)
    """Where expert-parallel groups come from: dataParallel (consecutive DP ranks, stride tensor; the default) or
    intraNode (consecutive ranks inside one pod, carved out of the TP group)."""
    micro_batches: int | None = Field(None, ge=1)
    """Pipeline micro-batches per step; defaults to the pipeline degree. More micro-batches shrink the pipeline
    bubble (pipeline-1)/(microBatches+pipeline-1)."""
    virtual_pipeline_stages: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Model chunks per pipeline stage (interleaved 1F1B; default 1): the idle share becomes
    (pipeline-1)/(virtualPipelineStages x microBatches + pipeline-1) for virtualPipelineStages times the
    point-to-point traffic. layers must be divisible by pipeline x virtualPipelineStages."""
    context: int | None = Field(None, ge=1, le=MAX_DEGREE)
    """Context-parallel degree (CP): ranks that split each sequence; attention runs as ring attention, passing
    key/value blocks around the CP group. Adds ranks: world = data x tensor x pipeline x context. Default 1."""
    pipeline_layers: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, min_length=1, max_length=MAX_PIPELINE_LAYERS)
    """Layers of each pipeline stage, first to last (uneven stages, as MindSpeed's --num-layer-list or MindFormers'
    offset): one entry per stage, summing to model.layers. Default: layers / pipeline on every stage. Not with
    virtualPipelineStages."""
    auto: bool | None = Field(None)
    """true: the operator's strategy planner chooses every degree, micro-batches, recompute, sequence parallelism and
    optimizer sharding for `world` NPUs (recorded in status.plan, fixed for the job's life); leave the degrees
    unset."""
    world: int | None = Field(None, ge=1, le=MAX_WORLD_SIZE)
    """NPUs an auto job may use (its world size); only with auto."""
    auto_constraints: AutoConstraints | None = Field(None)
    """Narrow the planner's search (auto jobs only)."""


class Npu(ApiModel):
    resource: str = Field(RESOURCE)
    """Extended resource name the Ascend device plugin advertises."""
    per_pod: int | None = Field(None, ge=1, le=MAX_CHIPS_PER_POD, description=f"NPUs (ranks) per pod; defaults to the chips per node of the chip type ({_CHIPS_PER_NODE_TEXT}).")
    chip: Chip = Field(cast(Chip, "910B"))  # validate_default checks the str against Chip; use_enum_values keeps it
    """Chip type the job needs: 910A (HCCS rings), 910B, or A3 (super-pods)."""
    hardware_profile: str | None = Field(None, max_length=63)
    """Hardware profile the planner predicts with: a name the operator's --hardware-profiles file (the chart's
    hardwareProfiles) defines; default: the chip's own profile."""
    # no schema default: a defaulted field would change every stored job's spec, hence its status.plan.specHash
    use_observed_efficiency: bool | None = Field(None)
    """Scale the planner's step-time predictions (parallelism auto's choice, StrategyFits) by what this cluster's
    jobs measured on the same hardware profile: the operator's ascend-hybrid-observed-efficiency ConfigMap
    (docs/planner.md). The factor in use when the job is planned is recorded in status.plan.observed. Default off."""


class Model(ApiModel):
    preset: Preset = Field(Preset.tiny)
    """Model preset; explicit fields override it. custom needs layers, hidden, heads and vocab."""
    layers: int | None = Field(None, ge=1)
    """Transformer layers; must be divisible by the pipeline degree."""
    hidden: int | None = Field(None, ge=1)
    """Hidden size; must be divisible by heads."""
    heads: int | None = Field(None, ge=1)
    """Attention heads; must be divisible by the tensor degree."""
    ffn_hidden: int | None = Field(None, ge=1)
    """Feed-forward inner size; custom defaults to 4 x hidden."""
    vocab: int | None = Field(None, ge=1)
    """Vocabulary size."""
    experts: int | None = Field(None, ge=0)
    """MoE experts per layer (0 = dense); must be divisible by the expert degree."""
    top_k: int | None = Field(None, ge=1)
    """Experts each token is routed to (MoE only)."""
    kv_heads: int | None = Field(None, ge=1)
    """Key/value heads (grouped-query attention); defaults to heads. Must divide heads and be divisible by the tensor
    degree (each TP rank holds whole key/value heads)."""
    ffn_type: FfnType | None = Field(None)
    """Feed-forward block: gelu (two matrices; the default) or swiglu (three matrices, as in Llama)."""
    capacity_factor: float | None = Field(None, gt=0, le=64)
    """MoE only: each expert takes at most capacityFactor x tokens x topK / experts tokens per routing group; the
    rest are dropped, and its buffers are padded to that size (compute and all-to-all grow with it). Default 1.25;
    the seed's tuning case lowers it to 0.8."""
    aux_loss_weight: float | None = Field(None, ge=0, le=1000)
    """MoE only: weight of the auxiliary load-balancing loss (Switch/GShard) added to the training loss. Default
    0.01."""
    sliding_window: int | None = Field(None, ge=1)
    """Sliding-window attention (Mistral's): each token attends to itself and the slidingWindow - 1 tokens before
    it. With flashAttention the kernel skips the blocks outside the window, so attention costs about seqLength x
    slidingWindow instead of seqLength² / 2; without it every score is computed and masked. Default: none (full
    causal attention). Not with context parallelism (the trainer's ring attention is causal only)."""


AUTO = "auto"
# int or "auto": the apiserver's int-or-string form (untyped); its CEL rule bounds the number and names the one word.
EVERY_STEPS_SCHEMA: JsonDict = {
    "x-kubernetes-int-or-string": True, "default": 100,
    "x-kubernetes-validations": [{
        "rule": "type(self) == int ? self >= 1 : self == 'auto'",
        "messageExpression": ("type(self) == string ? "
                              r"'spec.training.checkpoint.everySteps=\'%s\': must be an integer ≥ 1 or auto'.format([self])"
                              " : 'spec.training.checkpoint.everySteps=%d: must be an integer ≥ 1 or auto'.format([self])")}]}


class Checkpoint(ApiModel):
    claim_name: str = Field(max_length=DNS1123_SUBDOMAIN_MAX)
    """PersistentVolumeClaim mounted at /checkpoints in every pod (a PersistentVolumeClaim name: a lowercase RFC 1123
    subdomain)."""
    every_steps: Annotated[int | Literal["auto"], WithJsonSchema(EVERY_STEPS_SCHEMA)] = Field(100)
    """Save a checkpoint every this many steps; training resumes from the newest. auto: the operator sets it from the
    save cost the trainer measures and the failure rate it sees (Young/Daly: the interval ≈ √(2 × save seconds ×
    mean time between failures), bounded), changes it as they change and reports it in status.checkpointInterval;
    until the first save is measured the trainer saves every 100 steps."""

    @field_validator("every_steps", mode="before")
    @classmethod
    def _steps_or_auto(cls, value: Any) -> Any:
        if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise ValueError(f"must be an integer ≥ 1 or {AUTO}")


class Training(ApiModel):
    steps: int = Field(1000, ge=1)
    """Training steps; progress is step / steps."""
    global_batch_size: int | None = Field(None, ge=1)
    """Samples per step across all DP ranks; defaults to data x microBatches. Must be a multiple of data x
    microBatches."""
    seq_length: int = Field(128, ge=1)
    """Tokens per sample."""
    learning_rate: float = Field(0.001, gt=0)
    """Peak learning rate."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Random seed (0 to 2^32-1); the same seed and global batch give the same losses at any DP degree."""
    recompute: Annotated[Recompute, WithJsonSchema(RECOMPUTE_SCHEMA)] = Field(Recompute.none)
    """Activation recomputation in the backward pass: none, selective (attention scores only) or full (each layer
    from its input). The old boolean form is accepted: true means full, false none."""
    sequence_parallel: bool = Field(False)
    """Sequence parallelism: split the layer norms and dropouts along the sequence inside the TP group, dividing the
    activations TP does not split by the tensor degree."""
    flash_attention: bool = Field(False)
    """Fused (flash) attention: the attention scores are never stored, removing their activation memory."""
    optimizer_shard: bool = Field(False)
    """Shard optimizer state across DP ranks (MindSpore parallel optimizer)."""
    gradient_bucket_mb: int | None = Field(None, alias="gradientBucketMB", ge=1, le=4096)
    """Gradient bucket size in MB: the data-parallel gradient all-reduces are fused into buckets of this size
    (MindSpore's comm_fusion, mode size), each sent as soon as its gradients are ready so it overlaps the rest of
    the backward pass. The seed measures 16-64 MB, 32 best on 910. Default: MindSpore's own fusion."""
    gradient_clip_norm: float = Field(0.0, ge=0)
    """Clip the global L2 norm of the gradients to this value before each update; 0 turns clipping off. The seed's
    fix for exploding gradients, with a lower learningRate."""
    divergence_loss_factor: float = Field(10.0, ge=0)
    """The trainer ends the job as NumericalDivergence when the loss rises above this many times its lowest value so
    far; 0 turns the check off, else it must be above 1. NaN or Inf always ends it."""
    divergence_grad_factor: float = Field(100.0, ge=0)
    """The trainer ends the job as NumericalDivergence when the gradient norm rises above this many times its running
    median; 0 turns the check off, else it must be above 1."""
    checkpoint: Checkpoint | None = Field(None)
    """Where and how often to checkpoint."""

    @field_validator("recompute", mode="before")
    @classmethod
    def _boolean_recompute(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return Recompute.full.value if value else Recompute.none.value
        return value


class TemplateMetadata(ApiModel):
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels copied onto every pod."""
    annotations: dict[str, str] = Field(default_factory=dict, max_length=MAX_TEMPLATE_ANNOTATIONS)
    """Annotations copied onto every pod; none under the prefixes the Ascend device plugin, Volcano, Kueue and the
    operator write on the pods."""


class ComputeResources(ApiModel):
    requests: dict[str, str] = Field(default_factory=dict)
    """cpu/memory requests of the trainer container (NPUs come from npu.perPod)."""
    limits: dict[str, str] = Field(default_factory=dict)
    """cpu/memory limits of the trainer container (NPUs come from npu.perPod)."""


MAX_PULL_SECRETS = 16


class Template(ApiModel):
    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    """Labels and annotations for every pod."""
    image: str = Field(DEFAULT_TRAINER_IMAGE, max_length=IMAGE_MAX)
    """Trainer image, a reference the kubelet can pull ([registry[:port]/]lowercase/path[:tag][@digest]); defaults to
    the bundled MindSpore trainer."""
    image_pull_policy: PullPolicy | None = Field(None)
    """Image pull policy of the trainer container: Always, IfNotPresent or Never."""
    command: list[str] | None = Field(None)
    """Container command; defaults to the image's entrypoint (ascend-hybrid-trainer launch)."""
    args: list[str] | None = Field(None)
    """Container args."""
    env: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"items": RAW_OBJECT})
    """Extra environment variables (Kubernetes EnvVar); they win over the operator's defaults except the rank
    variables."""
    resources: ComputeResources = Field(default_factory=ComputeResources)
    """cpu/memory of the trainer container."""
    volumes: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"items": RAW_OBJECT})
    """Extra pod volumes (Kubernetes Volume)."""
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"items": RAW_OBJECT})
    """Extra mounts of the trainer container (Kubernetes VolumeMount)."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Nodes the pods may use (also honoured by the operator's placement)."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list, json_schema_extra={"items": RAW_OBJECT})
    """Tolerations (Kubernetes Toleration), honoured by the operator's placement."""
    service_account_name: str | None = Field(None, max_length=DNS1123_SUBDOMAIN_MAX)
    """ServiceAccount of the pods (a lowercase RFC 1123 subdomain); empty: the job's own, `<job>-launcher`, which
    may use nothing but the job's LauncherChannel and carries no image pull secrets of the namespace's default."""
    image_pull_secrets: list[Annotated[str, Field(max_length=DNS1123_SUBDOMAIN_MAX)]] = Field(
        default_factory=list, max_length=MAX_PULL_SECRETS)
    """Secrets in the job's namespace the kubelet pulls the image with (the pods' imagePullSecrets, by name; at
    most 16). The job's own ServiceAccount does not inherit those of the namespace's default one."""
    priority_class_name: str | None = Field(None, max_length=DNS1123_SUBDOMAIN_MAX)
    """PriorityClass of the pods (a lowercase RFC 1123 subdomain)."""


class Hccl(ApiModel):
    connect_timeout_seconds: int = Field(120, ge=1)
    """HCCL_CONNECT_TIMEOUT: seconds HCCL waits for peers when building links."""
    exec_timeout_seconds: int = Field(600, ge=1)
    """HCCL_EXEC_TIMEOUT: seconds a collective may wait for its peers."""
    whitelist_disable: bool = Field(True)
    """HCCL_WHITELIST_DISABLE: accept links from any address."""
    socket_ifname: str | None = Field(None)
    """HCCL_SOCKET_IFNAME: host interface for HCCL's socket traffic."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra HCCL_* variables for every pod."""


# mypy reads Enum members only from a literal; these are computed from causes.py
Cause = Enum("Cause", {name: name for name in CAUSES}, type=str)  # type: ignore[misc]
FailureAction = Enum("FailureAction", {name: name for name in ACTIONS}, type=str)  # type: ignore[misc]
_SOFTWARE_TEXT = " and ".join(sorted(SOFTWARE_CAUSES))


class FailurePolicyRule(ApiModel):
    causes: list[Cause] | None = Field(None, min_length=1, max_length=len(CAUSES))
    """Matches when the cause of the failure (status.lastFailure.cause) is one of these: what the trainer's
    termination message says, or NodeNotReady, ChipUnhealthy, PodDeleted, SchedServiceChanged as the operator sees
    them."""
    exit_codes: list[Annotated[int, Field(ge=0, le=255)]] | None = Field(None, min_length=1, max_length=64)
    """Matches when the first failed container exited with one of these codes."""
    pod_conditions: list[Annotated[str, Field(min_length=1, max_length=316)]] | None = Field(
        None, min_length=1, max_length=16)
    """Matches when one of these pod condition types (e.g. DisruptionTarget) is True on the first failed pod."""
    action: FailureAction = Field(description=f"FailJob: the job fails at once. RestartJob: the whole gang restarts (recovery rung RestartGang), counted against backoffLimit. RestartJobAvoidingNode: the same, and the node of the first failed rank is not used again (never for {_SOFTWARE_TEXT}). RestartRanks: every pod is kept and its launcher restarts its MindSpore processes from the newest committed checkpoint. ReplacePod: only the failed pod is created again at its index, the others restart their ranks in place. Ignore: the recovery the cause gets by default, not counted against backoffLimit (counted in status.ignoredFailures). A rung that fails or passes its timeout gives way to the next (spec.runPolicy.recovery).")


class FailurePolicy(ApiModel):
    rules: list[FailurePolicyRule] = Field(default_factory=list, max_length=MAX_POLICY_RULES)
    """Evaluated in order, the first rule that matches decides; each sets exactly one of causes, exitCodes or
    podConditions. Without a match: ConfigError, DataError, DeviceOutOfMemory, NumericalDivergence and
    RankTableRejected fail the job; HCCLConnectTimeout, HCCLExecTimeout, NodeNotReady and ChipUnhealthy restart it
    avoiding the node; anything else restarts it."""


class Rung(str, Enum):
    restart_ranks = "RestartRanks"
    replace_pod = "ReplacePod"
    restart_gang = "RestartGang"


class Recovery(ApiModel):
    finest_rung: Rung = Field(Rung.restart_ranks)
    """The finest rung of the recovery ladder a failure may start at: RestartRanks (pods kept, every launcher
    restarts its MindSpore processes from the newest committed checkpoint), ReplacePod (only the lost pod created
    again), or RestartGang (every pod deleted and the gang placed again, as before this ladder existed)."""
    restart_ranks_timeout_seconds: int = Field(300, ge=10, le=86400)
    """RestartRanks gives way to ReplacePod when training has not stepped again this many seconds after the decision
    (MindSpore start, checkpoint load and graph compilation included)."""
    replace_pod_timeout_seconds: int = Field(600, ge=10, le=86400)
    """ReplacePod gives way to RestartGang when training has not stepped again this many seconds after the decision
    (scheduling, image pull and start of the new pod included)."""
    max_in_place_per_hour: int = Field(6, ge=0, le=32)
    """At most this many incidents within an hour start at RestartRanks or ReplacePod; further ones restart the whole
    gang. 0: every failure restarts the whole gang."""


class SlownessAction(str, Enum):
    report = "Report"
    replace_node = "Replace"
    shrink = "Shrink"


class Slowness(ApiModel):
    action: SlownessAction = Field(SlownessAction.report)
    """What a confirmed slow node leads to. Report: the condition SlowNode, an event and a metric only. Replace: at
    the next checkpoint, the node avoided and only its pod made again elsewhere (ReplacePod; the other pods restart
    their ranks in place); with spec.elastic and no node free, the job shrinks around it as for a lost node. Shrink
    (spec.elastic only): the node avoided and its pod dropped at the next checkpoint, the data degree shrunk (the
    global batch kept), grown back when a healthy node is free."""
    compute_factor: float = Field(1.2, gt=1, le=10)
    """A rank is slow when its own compute per step (the trainer times it apart from the collectives' wait) takes
    more than this many times the median of its peers' (the other ranks of its pipeline stage)."""
    confirm_samples: int = Field(3, ge=1, le=100)
    """Telemetry samples in a row that must name the same node before SlowNode turns on (and healthy ones before it
    turns off)."""
    min_slowdown: float = Field(1.1, ge=1, le=10)
    """Act (Replace, Shrink) only while the job's steps take at least this many times its healthy pace, and only
    when the steps left are worth more than what the action costs (a restart of the ranks and the steps since the
    checkpoint)."""
    max_actions_per_hour: int = Field(1, ge=0, le=12)
    """At most this many actions for slowness within an hour; beyond, SlowNode is only reported."""


class RunPolicy(ApiModel):
    backoff_limit: int = Field(3, ge=0)
    """Recoveries after failures (any rung of the recovery ladder, one per incident) before the job is Failed;
    recoveries from node or chip faults (status.disruptions) and ignored failures do not count."""
    active_deadline_seconds: int | None = Field(None, ge=1)
    """Fail the job when it runs longer than this."""
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    """Delete the job this long after it Succeeded or Failed."""
    suspend: bool = Field(False)
    """Suspended jobs keep their spec and lose their pods; resuming places them anew."""
    scheduling_timeout_seconds: int = Field(300, ge=1)
    """Pods not all bound within this many seconds: the attempt is deleted and re-planned."""
    clean_pod_policy: CleanPodPolicy = Field(CleanPodPolicy.running)
    """Pods deleted when the job ends: Running (those still running), All, or None."""
    refuse_unfit_strategy: bool = Field(False)
    """true: a strategy the planner predicts to run out of memory, to idle more than a quarter of each step, or to
    stretch TP across nodes fails the job before any pod exists (condition StrategyFits); false: it only warns."""
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    """What a failure of the gang leads to, by its cause, exit code or pod condition (docs/troubleshooting.md)."""
    recovery: Recovery = Field(default_factory=Recovery)
    """The recovery ladder: the finest rung allowed, each rung's timeout and the cap on in-place recoveries
    (docs/reliability.md)."""
    slowness: Slowness = Field(default_factory=Slowness)
    """A slow node found from the ranks' compute times: reported, or acted on at the next checkpoint
    (docs/reliability.md, "Slow nodes")."""


class Monitoring(ApiModel):
    utilization_spread_percent: float = Field(30.0, gt=0, le=100)
    """LoadImbalanced when the busiest and the idlest NPU of the job differ by more than this many points of AI-core
    utilization (npu-exporter or the trainer's npu-smi figures)."""
    imbalance_samples: int = Field(3, ge=1, le=1000)
    """LoadImbalanced turns on after this many consecutive telemetry samples (one per --telemetry-interval) above
    utilizationSpreadPercent."""
    straggler_factor: float = Field(1.5, gt=1, le=100)
    """Straggling when a step takes more than this many times the median of the recent steps (and, where the planner
    predicts the step time, more than this many times its prediction)."""
    straggler_window: int = Field(10, ge=3, le=100)
    """Telemetry samples the recent median step time is taken over."""
    straggler_samples: int = Field(2, ge=1, le=1000)
    """Straggling turns on after this many consecutive samples above stragglerFactor (one slow sample is often a
    checkpoint save that was still running when the trainer was read)."""
    stall_seconds: int = Field(300, ge=1)
    """TrainingStalled when the training step has not advanced for this many seconds while every pod runs (counted
    from the first step, so graph compilation is not a stall)."""


class TorAffinity(str, Enum):
    normal_schema = "normal-schema"
    large_model_schema = "large-model-schema"


class VolcanoScheduling(ApiModel):
    queue: str = Field(DEFAULT_VOLCANO_QUEUE, max_length=DNS1123_SUBDOMAIN_MAX)
    """Volcano Queue (cluster-scoped) the job's PodGroups wait in: Volcano admits a PodGroup when its Queue has room
    for its minResources, then binds every pod of it together or none (a lowercase RFC 1123 subdomain)."""
    tor_affinity: TorAffinity | None = Field(None)
    """Leaf-switch affinity of Huawei's Ascend plugin (PodGroup label tor-affinity; the cluster needs its
    basic-tor-node-cm): normal-schema packs the job under the switch with the fewest free nodes, large-model-schema
    gives a job of 4 pods or more whole switches. Empty: none."""
    sp_block: int | None = Field(None, ge=SUPER_POD_CHIPS_PER_POD, le=MAX_WORLD_SIZE)
    """A3 jobs of 16-chip pods only: chips per logical super-pod (PodGroup annotation sp-block), a multiple of 16
    that divides the job's chips; Volcano keeps each block's pods inside one physical super-pod, its ranks
    consecutive. Empty: the job's chips, the whole job one logical super-pod."""


class Scheduling(ApiModel):
    topology_tiers: list[Annotated[str, Field(max_length=LABEL_KEY_MAX)]] = Field(
        default_factory=lambda: [RACK_LABEL], max_length=MAX_TOPOLOGY_TIERS)
    """Node label keys of network tiers, innermost first (at most 16); stages and DP groups are kept inside the
    fewest tier domains."""
    scheduler_name: str | None = Field(None, max_length=DNS1123_SUBDOMAIN_MAX)
    """Scheduler of the pods (a lowercase RFC 1123 subdomain). volcano: the job runs through Volcano, as MindCluster
    runs its jobs — a PodGroup per attempt, Volcano and Huawei's Ascend plugin choose nodes and chips, the operator's
    placement is a preference (docs/install.md, "On a MindCluster cluster with Volcano"). Any other name binds the
    pods the operator placed. Empty: the operator's --scheduler (the default scheduler unless it says volcano)."""
    queue: str | None = Field(None, max_length=LABEL_VALUE_MAX)
    """Kueue LocalQueue (in the job's namespace) that admits the job: each attempt's pods form one Kueue pod group,
    created gated and unplaced; the operator places and releases them only once Kueue has admitted the whole gang
    against its ClusterQueue's quota (condition Admitted; reason WaitingForQuota while Kueue holds it, Preempted
    after an eviction, which starts a new attempt without counting a restart). The namespace must be one Kueue
    manages (label kueue.x-k8s.io/managed=true). Empty: no queue, the gang is placed at once. Not with Volcano: a
    Volcano Queue is spec.scheduling.volcano.queue."""
    volcano: VolcanoScheduling | None = Field(None)
    """Volcano's options for the job's PodGroups; setting them runs the job through Volcano (schedulerName volcano,
    or empty)."""


class Elastic(ApiModel):
    min_data: int = Field(ge=1, le=MAX_DEGREE)
    """The smallest data-parallel degree the job accepts; setting spec.elastic turns elasticity on. When a lost node
    leaves no room for the gang, the job restarts at the largest data degree down to this one that divides the
    global batch, keeps every rule and fits the free chips; tensor, pipeline and expert degrees never change, the
    lost DP ways become gradient-accumulation micro-batches, so each step still sees the whole global batch. At most
    spec.parallelism.data."""
    grow_back: bool = Field(True)
    """Restart at the spec's data degree, at the next checkpoint boundary, once a placement for it fits again."""
    replacement_timeout_seconds: int = Field(120, ge=0, le=86400)
    """How long a lost pod may wait for a replacement (from the recovery's decision) before the job shrinks; 0
    shrinks at once."""


class AscendHybridJobSpec(ApiModel):
    parallelism: Parallelism = Field()
    """Parallel degrees: data, tensor, pipeline, expert and micro-batches. World size = data x tensor x pipeline."""
    npu: Npu = Field(default_factory=Npu)
    """Which NPUs and how many per pod."""
    model: Model = Field(default_factory=Model)
    """Model architecture (preset plus overrides)."""
    training: Training = Field(default_factory=Training)
    """Training loop settings."""
    template: Template = Field(default_factory=Template)
    """Pod template of every rank-group pod."""
    hccl: Hccl = Field(default_factory=Hccl)
    """HCCL settings injected into every pod."""
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    """Restart, deadline, cleanup and suspend policy."""
    scheduling: Scheduling = Field(default_factory=Scheduling)
    """Topology tiers and scheduler."""
    monitoring: Monitoring = Field(default_factory=Monitoring)
    """Thresholds of the live anomaly conditions LoadImbalanced, Straggling and TrainingStalled."""
    elastic: Elastic | None = Field(None)
    """Elastic data parallelism: shrink the data degree when a lost node leaves no room, grow back when there is
    room again (docs/reliability.md). Not with spec.parallelism.auto. With spec.scheduling.queue each size is a pod
    group of its own, admitted by Kueue for the chips it runs on."""


class Condition(ApiModel):
    type: str = Field()
    """Condition type."""
    status: str = Field()
    """True, False or Unknown."""
    reason: str = Field()
    """CamelCase reason."""
    message: str = Field("")
    """Human-readable detail."""
    last_transition_time: str = Field()
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = Field(None)
    """Spec generation the condition was computed from."""


class PodCounts(ApiModel):
    total: int = Field(0)
    """Pods of the current attempt."""
    pending: int = Field(0)
    """Pods not yet running."""
    running: int = Field(0)
    """Running pods."""
    succeeded: int = Field(0)
    """Succeeded pods."""
    failed: int = Field(0)
    """Failed pods."""


class PlannedPlacement(ApiModel):
    nodes: list[str] = Field(default_factory=list)
    """The operator's node for each pod, by pod index; empty when it found none."""
    racks: int | None = Field(None)
    """Tier domains (racks) the plan spans."""
    stage_racks: int | None = Field(None)
    """Racks of the pipeline stages, summed over the stages."""
    tensor_groups_node_local: str | None = Field(None)
    """TP groups inside one node in the plan."""


class PlacementStatus(ApiModel):
    attempt: int | None = Field(None)
    """Attempt this placement was made for."""
    nodes: list[str] = Field(default_factory=list)
    """Node of each pod, by pod index. Under Volcano: where Volcano bound it, empty while it is not bound."""
    scheduler: str | None = Field(None)
    """volcano when Volcano places the pods (the plan is then a preference it was given)."""
    pod_group: str | None = Field(None)
    """The attempt's Volcano PodGroup."""
    planned: PlannedPlacement | None = Field(None)
    """Under Volcano: the operator's plan, given to Volcano as each pod's preferred node."""
    on_planned_nodes: str | None = Field(None)
    """Under Volcano: pods bound on their planned node, e.g. 16/16."""
    stage_racks: int | None = Field(None)
    """Racks of the pipeline stages, summed over the stages (each stage kept in the fewest)."""
    remaking: list[int] = Field(default_factory=list)
    """Under Volcano: pod indexes whose pod a node refused at admission, made again in the same PodGroup."""
    summary: str | None = Field(None)
    """Nodes and racks the gang spans, e.g. 16 nodes in 2 racks."""
    tensor_groups_node_local: str | None = Field(None)
    """TP groups inside one node, e.g. 16/16."""
    racks: int | None = Field(None)
    """Tier domains (racks) the job spans."""
    reason: str | None = Field(None)
    """Why the job cannot be placed, when it cannot."""


class RankTableStatus(ApiModel):
    config_map: str | None = Field(None)
    """ConfigMap holding hccl.json."""
    status: str | None = Field(None)
    """initializing or completed."""
    version: str | None = Field(None)
    """hccl.json format version."""


class TrainingStatus(ApiModel):
    step: int | None = Field(None)
    """Latest training step."""
    loss: float | None = Field(None)
    """Latest loss (global batch)."""
    tokens_per_second: float | None = Field(None)
    """Training throughput."""
    step_seconds: float | None = Field(None)
    """Mean seconds per step."""
    progress_percentage: float | None = Field(None)
    """step / spec.training.steps, in percent."""
    estimated_remaining_seconds: float | None = Field(None)
    """Remaining steps x step time."""


class UtilizationStatus(ApiModel):
    npu_percent: float | None = Field(None)
    """Mean AI-core utilization of the job's NPUs."""
    hbm_percent: float | None = Field(None)
    """Mean HBM use of the job's NPUs."""
    source: str | None = Field(None)
    """prometheus or trainer."""
    sampled_at: str | None = Field(None)
    """When the figures were read (RFC 3339); old values mean the source is unreachable."""


class EffectiveParallelism(ApiModel):
    data: int | None = Field(None)
    """Data-parallel degree the pods run with."""
    tensor: int | None = Field(None)
    """Tensor-parallel degree the pods run with."""
    pipeline: int | None = Field(None)
    """Pipeline degree the pods run with."""
    expert: int | None = Field(None)
    """Expert-parallel degree the pods run with."""
    expert_placement: str | None = Field(None)
    """dataParallel or intraNode."""
    micro_batches: int | None = Field(None)
    """Pipeline micro-batches per step."""
    virtual_pipeline_stages: int | None = Field(None)
    """Model chunks per pipeline stage."""
    context: int | None = Field(None)
    """Context-parallel degree the pods run with (absent: 1)."""
    pipeline_layers: list[int] | None = Field(None)
    """Layers of each pipeline stage (absent: the even split)."""


class WarmupMark(ApiModel):
    steps: float = Field()
    """Cumulative steps of the lead trainer process at the mark."""
    seconds: float = Field()
    """Cumulative step seconds at the mark."""


class MeasuredStep(ApiModel):
    step_seconds: float | None = Field(None)
    """Measured mean seconds per step."""
    tokens_per_second: float | None = Field(None)
    """Measured tokens per second of the job."""
    hbm_percent: float | None = Field(None)
    """Measured mean HBM use of the job's NPUs."""
    warmup_mark: WarmupMark | None = Field(None)
    """The lead trainer's cumulative step count and seconds when this attempt passed its first 20 steps."""
    steady_steps: float | None = Field(None)
    """Steps measured since the warm-up mark."""
    steady_step_seconds: float | None = Field(None)
    """Mean seconds per step since the warm-up mark (graph compilation and warm-up excluded); once 5 steps are in,
    stepTimeRatio is computed from it."""


class ObservedScale(ApiModel):
    step_scale: float = Field()
    """The observed factor the prediction was multiplied by (measured / predicted step seconds of the cluster's
    jobs on this hardware profile, median)."""
    jobs: int = Field()
    """How many jobs' readings it came from."""


class RunningPrediction(ApiModel):
    data: int = Field()
    """The data degree the job runs at now (an elastic job shrunk below the spec's)."""
    micro_batches: int = Field()
    """Its micro-batches per step."""
    step_seconds: float = Field()
    """The predicted step seconds at these degrees (scaled as the spec's prediction is); stepTimeRatio reads
    against it."""


class PlanStatus(ApiModel):
    source: str | None = Field(None)
    """planned (parallelism.auto: the planner chose it) or evaluated (the spec's own strategy, scored)."""
    hardware: str | None = Field(None)
    """Hardware profile the prediction used."""
    spec_hash: str | None = Field(None)
    """Hash of what the prediction read (model, training, npu, parallelism, the profile); a change plans again."""
    parallelism: EffectiveParallelism | None = Field(None)
    """The strategy's degrees."""
    micro_batch_size: int | None = Field(None)
    """Samples per micro-batch."""
    recompute: str | None = Field(None)
    """none, selective or full."""
    sequence_parallel: bool | None = Field(None)
    """Sequence parallelism inside the TP group."""
    flash_attention: bool | None = Field(None)
    """FlashAttention."""
    optimizer_shard: bool | None = Field(None)
    """Optimizer states (and weights) sharded across DP."""
    fits: bool | None = Field(None)
    """Whether the predicted memory of the most loaded stage fits the usable HBM."""
    memory: dict[str, Any] | None = Field(None, json_schema_extra=RAW_OBJECT)
    """Predicted memory per device (GiB), as `ascend-hybrid plan -o json` prints it."""
    time: dict[str, Any] | None = Field(None, json_schema_extra=RAW_OBJECT)
    """Predicted step time, compute, bubble and communication per group (seconds)."""
    tokens_per_second_per_device: float | None = Field(None)
    """Predicted tokens per second per NPU."""
    mfu: float | None = Field(None)
    """Predicted model FLOPs utilization (0-1)."""
    why: str | None = Field(None)
    """The dominant costs of the strategy, in words."""
    warnings: list[str] = Field(default_factory=list)
    """Predicted problems: out of memory, a large bubble, TP across nodes."""
    considered: int | None = Field(None)
    """Strategies the planner considered."""
    rejected: int | None = Field(None)
    """Strategies it rejected (invalid or out of memory)."""
    alternative: dict[str, Any] | None = Field(None, json_schema_extra=RAW_OBJECT)
    """For a strategy that does not fit: the planner's best one and its predicted gain."""
    measured: MeasuredStep | None = Field(None)
    """What the running job measures (from status.training and status.utilization)."""
    running: RunningPrediction | None = Field(None)
    """Only while an elastic job runs shrunk: the prediction for the degrees it runs at."""
    step_time_ratio: float | None = Field(None)
    """Measured / predicted step seconds (steady, once past warm-up), against `running` while it is set."""
    observed: ObservedScale | None = Field(None)
    """Set when spec.npu.useObservedEfficiency scaled this prediction by what the cluster's jobs measured."""
class FailureStatus(ApiModel):
    cause: str = Field()
    """Why the attempt ended: the trainer's cause (HCCLConnectTimeout, DeviceOutOfMemory, …) or NodeNotReady,
    ChipUnhealthy, PodDeleted, SchedServiceChanged."""
    action: str | None = Field(None)
    """What the failure policy did: FailJob, RestartJob, RestartJobAvoidingNode or Ignore."""
    attempt: int | None = Field(None)
    """The attempt that failed."""
    pod: str | None = Field(None)
    """The first failed pod."""
    node: str | None = Field(None)
    """Its node."""
    rank: int | None = Field(None)
    """The rank that reported the cause, when the trainer says."""
    exit_code: int | None = Field(None)
    """The container's exit code."""
    step: int | None = Field(None)
    """The training step it failed at, when the trainer says."""
    reason: str | None = Field(None)
    """The container's terminated reason (Error, OOMKilled, …)."""
    message: str | None = Field(None)
    """What happened, from the termination message or the operator's observation."""
    hint: str | None = Field(None)
    """What to change (docs/troubleshooting.md)."""
    time: str | None = Field(None)
    """When it failed (RFC 3339)."""


class RecoveryRecord(ApiModel):
    cause: str = Field()
    """The failure's cause (as status.lastFailure.cause)."""
    pod: str | None = Field(None)
    """The first failed pod."""
    node: str | None = Field(None)
    """Its node."""
    rank: int | None = Field(None)
    """The rank that reported the cause, when the trainer says."""
    step: int | None = Field(None)
    """The training step the fault hit (the trainer's, else the last one seen)."""
    attempt: int | None = Field(None)
    """The attempt the fault hit."""
    rungs: list[str] = Field(default_factory=list)
    """The rungs tried, in order: RestartRanks, ReplacePod, RestartGang; Shrink (spec.elastic: the gang restarted at
    a smaller data degree) and Grow (back to the spec's data degree, an incident of its own)."""
    recovered_by: str | None = Field(None)
    """The rung that brought training back."""
    outcome: str | None = Field(None)
    """Recovering, Recovered or JobFailed."""
    why: str | None = Field(None)
    """Why the last rung was chosen (the policy rule or default, an escalation, the hourly cap)."""
    counted: bool | None = Field(None)
    """Whether the incident counts against backoffLimit."""
    avoid: list[str] = Field(default_factory=list)
    """Nodes the cause suspects while the pods stay (RestartRanks); a rung that moves pods avoids them (they join
    status.avoidedNodes then)."""
    detected: str | None = Field(None)
    """When the failure happened or was seen (RFC 3339)."""
    decided: str | None = Field(None)
    """When the last rung was decided."""
    pods_ready: str | None = Field(None)
    """When every pod ran again (at once for RestartRanks)."""
    ranks_relaunched: str | None = Field(None)
    """When every pod's launcher had started its ranks again."""
    first_step_after: str | None = Field(None)
    """When training stepped again."""
    resumed_from_step: int | None = Field(None)
    """The checkpoint step training resumed from."""
    steps_redone: int | None = Field(None)
    """Steps trained again: the step the fault hit minus the step resumed from."""
    seconds: float | None = Field(None)
    """Detected to first step after, in seconds."""
    replacement_timed_out: bool | None = Field(None)
    """spec.elastic: no node took the lost pod within replacementTimeoutSeconds, so a smaller gang may run at once."""
    pods_kept: int | None = Field(None)
    """Shrink and Grow: how many running pods went on into the new world (their ranks restarted in place)."""


class RecoveryState(ApiModel):
    generation: int | None = Field(None)
    """The rank generation every launcher runs: raised by each RestartRanks (and ReplacePod), written to the
    LauncherChannel <job>-recovery the launchers watch."""
    rung: str | None = Field(None)
    """The in-place rung in progress (RestartRanks), while it runs."""
    replacing: int | None = Field(None)
    """ReplacePod: the index of the pod being made again."""
    unplaced: str | None = Field(None)
    """ReplacePod: why no node fits the replacement (RestartGang follows; spec.elastic: Shrink keeping the other
    pods)."""
    kept: list[str] | None = Field(None)
    """spec.elastic: the pods a shrink or growth kept, by the pod index each runs as now (their names carry the attempt they were made in;
    empty where a pod was made again since); the launchers take their new ranks and world from the LauncherChannel
    <job>-recovery."""
    kept_attempt: int | None = Field(None)
    """The attempt the kept pods joined."""


class ElasticStatus(ApiModel):
    data: int | None = Field(None)
    """The data-parallel degree the job runs with while shrunk (below spec.parallelism.data)."""
    micro_batches: int | None = Field(None)
    """The micro-batches per step while shrunk: the lost DP ways become gradient accumulation."""
    from_data: int | None = Field(None)
    """The data degree before the shrink."""
    since: str | None = Field(None)
    """When the job shrank (RFC 3339)."""
    grow_fits: bool | None = Field(None)
    """Whether a placement at the spec's data degree fits the free chips now (growBack)."""
    grow_reason: str | None = Field(None)
    """Why it does not fit."""
    grow_nodes: list[str] | None = Field(None)
    """Where the pods a growth adds go beside the running ones (the last probe's placement)."""
    grow_fits_at_step: int | None = Field(None)
    """The training step when it first fitted: the job grows once training passed the next checkpoint after it."""


class MonitoringStatus(ApiModel):
    sampled_at: str | None = Field(None)
    """The telemetry sample last folded in (RFC 3339)."""
    imbalanced_samples: int | None = Field(None)
    """Consecutive samples with the NPU utilization spread above the threshold."""
    step_seconds: list[float] = Field(default_factory=list)
    """Recent step times (seconds per step between samples, the checkpoint saves between them taken out), oldest
    first."""
    slow_samples: int | None = Field(None)
    """Consecutive samples with the step time above the straggler threshold."""
    checkpoint_seconds: float | None = Field(None)
    """The lead trainer's checkpoint seconds (ascend_trainer_checkpoint_seconds_sum) at lastStep."""
    last_step: int | None = Field(None)
    """The training step when it last advanced."""
    last_step_at: str | None = Field(None)
    """When the step last advanced (RFC 3339)."""


class GoodputSeconds(ApiModel):
    productive: float = Field(0.0)
    """New steps (never trained before) at the job's healthy pace."""
    slow_steps: float = Field(0.0)
    """What new steps took beyond the healthy pace: a slow node, a slow link, a throttled chip."""
    redone_steps: float = Field(0.0)
    """Steps trained again after a recovery resumed from an older checkpoint."""
    checkpoint_saves: float = Field(0.0)
    """The trainer's checkpoint saves that blocked training."""
    starts_and_restarts: float = Field(0.0)
    """Pods starting, MindSpore's start and graph compilation, and every recovery until training stepped again."""
    waiting_for_placement: float = Field(0.0)
    """A new attempt waiting for nodes (after a whole-gang restart, or a shrunk gang waiting to grow)."""


class GoodputProcess(ApiModel):
    epoch: str = Field()
    """attempt/rank generation of the lead trainer process last read."""
    base: int = Field()
    """The step it started from (its checkpoint)."""
    done: int = Field()
    """Steps it had completed at the last reading."""
    save_seconds: float = Field(0.0)
    """Seconds it had spent saving checkpoints."""
    saves: int = Field(0)
    """Checkpoints it had saved."""


class GoodputPending(ApiModel):
    from_: int = Field(alias="from")
    """The step before the interval."""
    to: int = Field()
    """The step after it."""
    seconds: float = Field()
    """Its stepping seconds (saves taken out)."""
    start: bool = Field(False)
    """The first interval of a trainer process (its start is charged to startsAndRestarts)."""
    redone: int = Field(0)
    """How many of its steps were trained before."""


class GoodputWindow(ApiModel):
    seconds: float = Field(0.0)
    """Stepping seconds in the window."""
    steps: int = Field(0)
    """Steps in it."""


class GoodputAccount(ApiModel):
    since: str | None = Field(None)
    """status.startTime: the account starts when the job first started."""
    accounted_at: str | None = Field(None)
    """Up to when the wall time is attributed (the last telemetry reading, or the last change of state)."""
    wall_seconds: float | None = Field(None)
    """accountedAt - since: what the buckets add up to."""
    seconds: GoodputSeconds | None = Field(None)
    """The buckets, in seconds; status.goodput = productive / wallSeconds."""
    steps_kept: int | None = Field(None)
    """New steps accounted (each step once, whatever was redone)."""
    steps_redone: int | None = Field(None)
    """Steps accounted as trained again."""
    stepping_seconds: float | None = Field(None)
    """The seconds the new steps took: productive and slowSteps together, split by the healthy pace."""
    healthy_step_seconds: float | None = Field(None)
    """The job's healthy pace: the step-weighted mean of its per-step times at most median + 3 x MAD."""
    predicted_step_seconds: float | None = Field(None)
    """The planner's step time for the degrees the job runs at, beside it."""
    mode: str | None = Field(None)
    """waiting, starting or running: the job's state since accountedAt."""
    world: int | None = Field(None)
    """The world size the healthy pace was measured at (a change measures it afresh)."""
    high_water: int | None = Field(None)
    """The highest step ever trained: steps up to it are redone."""
    pace: dict[str, int] = Field(default_factory=dict)
    """The per-step times measured (windows of 32 steps, or a minute), as steps per 1 % bin of 100 x ln(seconds)."""
    pace_intervals: int | None = Field(None)
    """Windows in the pace; it is trusted from 3."""
    pace_steps: int | None = Field(None)
    """Steps in the pace's windows."""
    window: GoodputWindow | None = Field(None)
    """The pace window being filled: stepping seconds and steps (32 steps, or a minute and 8 steps, make one
    observation)."""
    pending: list[GoodputPending] = Field(default_factory=list)
    """Running intervals waiting for the healthy pace to be known."""
    process: GoodputProcess | None = Field(None)
    """The lead trainer process as last read."""


class CheckpointInterval(ApiModel):
    every_steps: int | None = Field(None)
    """The interval the trainer saves at (training.checkpoint.everySteps: auto), from step fromStep on."""
    from_step: int | None = Field(None)
    """The step it applies from (a minute ahead of the step it was set at, so every launcher has it first)."""
    previous_every_steps: int | None = Field(None)
    """The interval in force before fromStep: a trainer process that starts before fromStep saves at it, as the
    processes that run on do."""
    save_seconds: float | None = Field(None)
    """The measured blocking save: the lead trainer's mean save seconds."""
    saves: int | None = Field(None)
    """Saves it was measured over."""
    mtbf_seconds: float | None = Field(None)
    """The mean time between failures the operator sees for this job."""
    failures: float | None = Field(None)
    """The job's failures it counts (weighted by age: a failure's weight halves in about 5 days)."""
    exposure_seconds: float | None = Field(None)
    """The time they were counted over (weighted alike)."""
    node_faults_per_node_day: float | None = Field(None)
    """The cluster's node faults per node-day (from every job's ledger), where they replace the job's own."""
    basis: str | None = Field(None)
    """The failure rate in words."""
    step_seconds: float | None = Field(None)
    """The job's healthy pace the interval is counted in."""
    optimum_seconds: float | None = Field(None)
    """Daly's optimum for these inputs: training seconds between saves."""
    optimum_steps: int | None = Field(None)
    """The optimum in steps, within the bounds (at least 30 s and the saves at most half the time, at most 6 h)."""
    changed_at: str | None = Field(None)
    """When everySteps last changed."""
    reason: str | None = Field(None)
    """Why everySteps is what it is."""


class SlowNodeFinding(ApiModel):
    node: str = Field()
    """The slow node."""
    since: str | None = Field(None)
    """When it was confirmed (RFC 3339)."""
    at_step: int | None = Field(None)
    """The training step then: an action waits for the next checkpoint after it."""
    pods: list[str] = Field(default_factory=list)
    """This job's pods on it."""
    ranks: list[int] = Field(default_factory=list)
    """Its ranks found slow (the first 64)."""
    ratio: float | None = Field(None)
    """Their compute over their peers' median compute."""
    slowdown: float | None = Field(None)
    """The job's recent step over its healthy pace."""
    evidence: str | None = Field(None)
    """The figures, in words."""
    save_at: int | None = Field(None)
    """The step the trainer was asked to save at, so the action need not wait for the interval's next checkpoint."""
    saves_at: int | None = Field(None)
    """The lead trainer process's count of checkpoint saves when the node was confirmed: one more means training
    passed a checkpoint since."""
    acted: str | None = Field(None)
    """When spec.runPolicy.slowness acted on it."""
    decision: str | None = Field(None)
    """What the policy did, or why it waits or only reports."""


class SlownessStatus(ApiModel):
    sampled_at: str | None = Field(None)
    """The telemetry sample last scored (RFC 3339)."""
    epoch: str | None = Field(None)
    """attempt/rank generation of the trainer processes scored."""
    scored: int | None = Field(None)
    """Samples scored; the job's first confirmSamples only learn each node's usual ratio."""
    epoch_scored: int | None = Field(None)
    """Samples scored in this epoch; its first confirmSamples (new processes warming up) neither learn nor judge."""
    baselines: dict[str, float] = Field(default_factory=dict)
    """Each node's usual compute ratio to its peers, where above 1.05 (a node always a little slower)."""
    suspects: dict[str, int] = Field(default_factory=dict)
    """The nodes the last sample found slow, each with the samples in a row that found it."""
    clear_samples: int | None = Field(None)
    """Samples in a row without the confirmed node slow (it clears at confirmSamples)."""
    unread: dict[str, int] = Field(default_factory=dict)
    """The suspect or confirmed nodes the last samples had no figures of (their pods' endpoints did not answer),
    each with the samples in a row: up to confirmSamples of them neither advance, break nor clear its count."""
    confirmed: SlowNodeFinding | None = Field(None)
    """The slow node the condition SlowNode names."""


class SlowNodeRecord(ApiModel):
    node: str = Field()
    """A node this job found slow and acted on: avoided for the job's life."""
    since: str | None = Field(None)
    """When it was confirmed."""
    ratio: float | None = Field(None)
    """Its ranks' compute over their peers'."""
    slowdown: float | None = Field(None)
    """The job's step over its healthy pace then."""
    action: str | None = Field(None)
    """Replace or Shrink."""
    at: str | None = Field(None)
    """When the action was taken."""


class AscendHybridJobStatus(ApiModel):
    phase: str | None = Field(None)
    """Pending, Placing, Starting, Running, Restarting, Succeeded, Failed or Suspended."""
    conditions: list[Condition] = Field(default_factory=list)
    """Created, StrategyFits, Admitted (queued jobs), Placed, RankTableReady, Running, Restarting, Succeeded, Failed,
    Suspended, MetricsAvailable, LoadImbalanced, Straggling, SlowNode, TrainingStalled, Degraded (spec.elastic: True
    while the job runs at a smaller data degree than its spec's), PlacementHonoured (under Volcano: whether where
    Volcano bound the pods is as close as the operator's plan)."""
    world_size: int | None = Field(None)
    """Ranks the pods run with: data x tensor x pipeline x context of status.parallelism (smaller than the spec's
    while an elastic job runs shrunk)."""
    attempt: int | None = Field(None)
    """Current gang attempt, from 1."""
    restarts: int | None = Field(None)
    """Recoveries after failures so far (one per incident, whatever rung brought it back), disruptions and ignored
    failures included."""
    disruptions: int | None = Field(None)
    """Restarts for a node or chip fault (NodeNotReady, ChipUnhealthy); not counted against backoffLimit."""
    ignored_failures: int | None = Field(None)
    """Restarts for failures a failure-policy rule said to Ignore; not counted against backoffLimit."""
    last_failure: FailureStatus | None = Field(None)
    """The first failure of the last attempt that failed, classified, with the fix."""
    observed_generation: int | None = Field(None)
    """Spec generation last acted on."""
    start_time: str | None = Field(None)
    """When the job first started."""
    completion_time: str | None = Field(None)
    """When the job Succeeded or Failed."""
    message: str | None = Field(None)
    """What the operator last did or why it waits."""
    pods: PodCounts | None = Field(None)
    """Pods of the current attempt by phase."""
    avoided_nodes: list[str] = Field(default_factory=list)
    """Nodes this job no longer uses: the node of the first failed rank of a RestartJobAvoidingNode failure (HCCL
    timeouts, NotReady, unhealthy chips), and a node whose kubelet refused this job's pods in two attempts."""
    admission_refusals: dict[str, int] = Field(default_factory=dict)
    """Per node, the attempts in which its kubelet refused a pod of this job at admission (RefusedByNode). One
    refusal is a race with a rival pod; a second means the node disagrees with what it reports, so it is avoided."""
    pod_template_hash: str | None = Field(None)
    """Hash of parallelism, npu and template the running pods were made from; a change restarts the job."""
    placement: PlacementStatus | None = Field(None)
    """Where the gang was placed."""
    rank_table: RankTableStatus | None = Field(None)
    """The HCCL rank table."""
    training: TrainingStatus | None = Field(None)
    """Training progress."""
    utilization: UtilizationStatus | None = Field(None)
    """NPU utilization."""
    parallelism: EffectiveParallelism | None = Field(None)
    """The degrees the pods run with: the spec's, the planner's for an auto job, or the shrunk data degree and its
    micro-batches while an elastic job runs degraded."""
    plan: PlanStatus | None = Field(None)
    """The strategy planner's prediction for the job's strategy (and its choice for an auto job), with what was
    measured."""
    monitoring: MonitoringStatus | None = Field(None)
    """What the anomaly conditions of the current attempt are computed from."""
    elastic: ElasticStatus | None = Field(None)
    """Present while the job runs shrunk (spec.elastic): the data degree it runs with and whether it can grow."""
    recovery: RecoveryState | None = Field(None)
    """The recovery ladder's state: the launchers' rank generation and the rung in progress."""
    recoveries: list[RecoveryRecord] = Field(default_factory=list)
    """The last 32 incidents, oldest first: cause, where, the rungs tried and the one that worked, their timestamps
    and the steps redone (docs/reliability.md)."""
    goodput: float | None = Field(None)
    """Fraction (0-1) of the wall time since the job first started that went to new training steps at the job's
    healthy pace (status.goodputAccount.seconds.productive / wallSeconds): slow steps, redone steps, checkpoint
    saves, starts, restarts and placement waits are what is missing from 1."""
    goodput_account: GoodputAccount | None = Field(None)
    """The wall time since the job first started, split into buckets that add up to it (docs/reliability.md)."""
    checkpoint_interval: CheckpointInterval | None = Field(None)
    """training.checkpoint.everySteps: auto: the interval in force and what it was computed from."""
    slowness: SlownessStatus | None = Field(None)
    """What the condition SlowNode is computed from: the suspect node, the confirmed one (docs/reliability.md)."""
    slow_nodes: list[SlowNodeRecord] = Field(default_factory=list)
    """The nodes this job found slow and acted on (spec.runPolicy.slowness), newest last: avoided for its life."""


# The launchers' channel (docs/reliability.md, "The launchers' channel"): its own kind, so that one Role per
# namespace can let pods reach their jobs' channels and nothing else (a grant on ConfigMaps would reach every
# ConfigMap of the namespace, one naming the object needs a Role per job).
CHANNEL_KIND = "LauncherChannel"
CHANNEL_PLURAL = "launcherchannels"
CHANNEL_SINGULAR = "launcherchannel"


class LauncherChannel(ApiModel):
    """The launchers' channel of one AscendHybridJob, <job>-recovery: the operator writes the rank generation,
    each pod's launcher its report. Written by the operator and the launchers, not by people."""

    data: dict[str, str] = Field(default_factory=dict)
    """`generation` (and `world` while pods an elastic shrink kept run) from the operator; under each pod's name,
    that pod's launcher's JSON report."""
