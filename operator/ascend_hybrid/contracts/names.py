"""Deterministic child names, labels and paths (design §6): the operator finds its children by these alone."""

from __future__ import annotations

FIELD_MANAGER = "ascend-hybrid-operator"
GROUP = "hybrid.ascend.dev"  # the API group of AscendHybridJob: every label, gate and annotation key is under it
HOSTNAME_LABEL = "kubernetes.io/hostname"

GANG_GATE = f"{GROUP}/gang"
JOB_LABEL = f"{GROUP}/job"
ATTEMPT_LABEL = f"{GROUP}/attempt"
POD_INDEX_LABEL = f"{GROUP}/pod-index"
MANAGED_BY = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
RANK_INDEX_ANNOTATION = "hccl/rankIndex"
CONTAINER_NAME = "ascend"
SCHED_HOST_ENV = "MS_SCHED_HOST"  # the ClusterIP of <job>-sched in every pod's env (design §8)

SCHED_PORT = 2222
METRICS_PORT = 9400
RANK_TABLE_DIR = "/user/serverid/devindex/config"
RANK_TABLE_FILE = f"{RANK_TABLE_DIR}/hccl.json"
JOB_CONFIG_DIR = "/etc/ascend-hybrid"
JOB_CONFIG_KEY = "job.json"  # in rings-config-<job> beside the rank table, projected alone into JOB_CONFIG_DIR
JOB_CONFIG_FILE = f"{JOB_CONFIG_DIR}/{JOB_CONFIG_KEY}"
CHECKPOINT_DIR = "/checkpoints"
RANK_TABLE_VOLUME = "ascend-ranktable"
# A job whose table may outgrow its ConfigMap (ranktable_sidecar.py): the ConfigMap is mounted here in the expander
# only, and RANK_TABLE_VOLUME is an emptyDir the expander writes the complete table into.
RANK_TABLE_SOURCE_DIR = "/etc/ascend-hybrid-ranktable"
RANK_TABLE_SOURCE_VOLUME = "ascend-ranktable-source"
EXPANDER_CONTAINER = "ranktable-expander"
DEFAULT_EXPANDER_IMAGE = "ascend-hybrid/operator:0.1.0"  # the operator's image (the chart passes its own)
JOB_CONFIG_VOLUME = "ascend-job-config"
CHECKPOINT_VOLUME = "ascend-checkpoints"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # token, ca.crt, namespace (kubelet's)
# The cluster's observed step scale per hardware profile (planner/observed.py), in the operator's namespace.
OBSERVED_EFFICIENCY_CONFIG_MAP = "ascend-hybrid-observed-efficiency"
DEFAULT_OPERATOR_NAMESPACE = "ascend-hybrid-system"  # where docs/install.md installs the chart
TERMINATION_LOG = "/dev/termination-log"  # the container's terminationMessagePath (Kubernetes' default) = AHJ_TERMINATION_LOG


def sched_service(job: str) -> str:
    return f"{job}-sched"


def headless_service(job: str) -> str:
    return job


def dns_endpoint_slice(job: str, index: int) -> str:
    """The EndpointSlices of the headless `<job>` the operator writes with each rank table (gang/render.py)."""
    return f"{job}-dns-{index}"


def rank_table_config_map(job: str) -> str:
    """The rank table (MindCluster's name for its ConfigMap) and job.json."""
    return f"rings-config-{job}"


def network_policy(job: str) -> str:
    return f"{job}-network"


def pod_name(job: str, attempt: int, index: int) -> str:
    return f"{job}-a{attempt}-{index}"


def pod_group(job: str, attempt: int) -> str:
    """The Volcano PodGroup of one attempt (contracts/volcano.py); the same name as its Kueue pod group."""
    return f"{job}-a{attempt}"


def job_labels(job: str) -> dict[str, str]:
    return {JOB_LABEL: job, **MANAGED_BY}


def launcher_channel(job: str) -> str:
    """The launchers' channel (recovery.py), a LauncherChannel: the operator writes `generation`, each launcher its
    pod's report."""
    return f"{job}-recovery"


# Each job's launchers reach their own channel and no other (gang/render.launcher_grant, docs/reliability.md
# "Security"): Role `<job>-launcher` allows get, watch and patch of LauncherChannel `<job>-recovery` by name, bound
# to the ServiceAccount the pods run as — `<job>-launcher`, made for the job, when its template names none.
def launcher_role(job: str) -> str:
    return f"{job}-launcher"


def job_service_account(job: str) -> str:
    """The ServiceAccount of the pods of a job whose template names none: the job's own, so that no other pod of
    the namespace (which all run as `default` unless told otherwise) shares its launchers' grant."""
    return f"{job}-launcher"


def launcher_binding(job: str, service_account: str) -> str:
    """The RoleBinding of the job's launcher Role to one ServiceAccount: its name says whom it binds, so it is only
    ever created, never changed (a template naming another ServiceAccount gets a binding of its own)."""
    own = launcher_role(job)
    return own if service_account == job_service_account(job) else f"{own}-{service_account}"


# Before each job had its own, one Role per namespace let the ServiceAccounts of all its jobs (`default` among them)
# write every channel there; the operator deletes it wherever it grants a job's launchers.
LEGACY_LAUNCHER_ROLE = "ascend-hybrid-launcher"


# The launchers' channel, LauncherChannel <job>-recovery (docs/reliability.md): the operator writes the rank
# generation under this key, each launcher its report under its pod's name (the trainer's control.py spells it
# again: its contract is the wire).
RECOVERY_GENERATION_KEY = "generation"
# Beside it, only while pods a shrink kept run (spec.elastic): the world they run in now, JSON (elastic_steps).
RECOVERY_WORLD_KEY = "world"
# Beside it, for training.checkpoint.everySteps: auto: the checkpoint interval in force, JSON {"everySteps", "fromStep"}
# (reconcile/checkpoint_steps.py; the launchers pass it to their ranks).
RECOVERY_CHECKPOINT_KEY = "checkpoint"
