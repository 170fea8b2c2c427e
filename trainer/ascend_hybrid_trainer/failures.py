"""How a training process ended, as a cause: the one table of log patterns, the exit code of each cause, the
termination record (one line of JSON in the container's termination message) and the pod's verdict over its
processes. Pure apart from reading and writing the record files; no MindSpore.

A worker classifies its own end (it knows the exception and the step) and writes its record to the file the
launcher names in AHJ_TERMINATION_LOG; the launcher reads those records and the tails of its processes' stderr
(MindSpore's and CANN's C++ logs go there, not into the Python exception), picks the cause of the pod — the first
cause, not an echo of it — and writes the pod's record to AHJ_TERMINATION_LOG (default /dev/termination-log, which
Kubernetes shows as the container's termination message), then exits with the cause's code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum

from .config import ConfigError, DataError
from .divergence import DivergenceError
from .rank_table import RankTableTimeout


class Cause(str, Enum):
    CONFIG_ERROR = "ConfigError"
    DATA_ERROR = "DataError"
    RANK_TABLE_TIMEOUT = "RankTableTimeout"
    RANK_TABLE_REJECTED = "RankTableRejected"
    HCCL_CONNECT_TIMEOUT = "HCCLConnectTimeout"
    HCCL_EXEC_TIMEOUT = "HCCLExecTimeout"
    PEER_FAILED = "PeerFailed"
    DEVICE_OUT_OF_MEMORY = "DeviceOutOfMemory"
    NUMERICAL_DIVERGENCE = "NumericalDivergence"
    UNKNOWN = "Unknown"


# One exit code per cause (docs/troubleshooting.md, "Causes and exit codes"). 2 is the usage-error convention the
# trainer always used for bad settings; 3 (the trainer's runtime, MindSpore, is not installed) is a ConfigError
# too. 1 is what Python returns for an uncaught exception. A process killed by signal s keeps the shell's 128 + s
# (137 for SIGKILL): the cause is then Unknown unless the kernel's OOM killer did it.
EXIT_CODES: dict[Cause, int] = {
    Cause.UNKNOWN: 1,
    Cause.CONFIG_ERROR: 2,
    Cause.RANK_TABLE_TIMEOUT: 10,
    Cause.HCCL_CONNECT_TIMEOUT: 11,
    Cause.HCCL_EXEC_TIMEOUT: 12,
    Cause.PEER_FAILED: 13,
    Cause.DEVICE_OUT_OF_MEMORY: 14,
    Cause.NUMERICAL_DIVERGENCE: 15,
    Cause.DATA_ERROR: 16,
    Cause.RANK_TABLE_REJECTED: 17,
}
MISSING_RUNTIME_EXIT = 3  # cause ConfigError
CAUSE_OF_EXIT = {code: cause for cause, code in EXIT_CODES.items()} | {MISSING_RUNTIME_EXIT: Cause.CONFIG_ERROR}
# A rank can end with these because another rank failed first: they never win over another cause of the pod.
ECHOES = (Cause.PEER_FAILED, Cause.HCCL_EXEC_TIMEOUT, Cause.HCCL_CONNECT_TIMEOUT)
DETAIL_LIMIT = 1000  # the whole termination message is capped at 4096 bytes by the kubelet


@dataclass(frozen=True)
class Pattern:
    cause: Cause
    regex: re.Pattern
    source: str  # where this form of the message is published (or measured)
    example: str  # a real line of that form; tests/trainer/test_failure_patterns.py classifies each


def _p(cause: Cause, regex: str, source: str, example: str) -> Pattern:
    return Pattern(cause, re.compile(regex), source, example)


MS_DOCS_CANN = "MindSpore docs, tutorials/source_en/debug/error_analysis/cann_error_cases.md (mindspore-ai/docs)"
MEASURED_CPU = "measured with MindSpore 2.10.0 on CPU (docs/troubleshooting.md, \"How the patterns were measured\")"
HCCL_PARSER = "CANN HCCL's rank-table parser, topoinfo_ranktableParser.cc (cann-hccl)"

# In priority order: the first pattern that matches any line wins. Memory first (an out-of-memory rank makes its
# peers time out), then what names a lost peer, then HCCL's refusal of the rank table (while the communicator
# forms: the cluster then never forms), then collective and connection timeouts.
PATTERNS: tuple[Pattern, ...] = (
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"Out of Memory!!! Request memory size",
       "MindSpore runtime, mindspore/ccsrc/runtime/device/ascend/ascend_memory_adapter.cc (mindspore-ai/mindspore)",
       "Out of Memory!!! Request memory size: 33100113920B, Memory Statistic:"),
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"memory isn't enough and alloc failed",
       "MindSpore runtime, mindspore/ccsrc/runtime/graph_scheduler/actor/actor_common.h (mindspore-ai/mindspore); "
       "the same string is in libmindspore_ms_backend.so of MindSpore 2.10.0",
       "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: "
       "Default/network-GPTWithLoss/layers-CellList/0-DecoderLayer/MatMul-op120, alloc size: 2147483648B."),
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"Allocate memory failed, maybe device memory\(device id:\d+\) isn't enough",
       "MindSpore PyNative runtime (mindspore-ai/mindspore); string in libmindspore_ms_backend.so of 2.10.0",
       "RuntimeError: Allocate memory failed, maybe device memory(device id:3) isn't enough. Allocate size: "
       "1073741824"),
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"Malloc device memory failed",
       MS_DOCS_CANN + ", \"EE9999: On-Chip Video Memory Allocation Failure\"",
       "RuntimeError: mindspore/ccsrc/runtime/device/ascend/ascend_memory_manager.cc:62 MallocDeviceMemory] Malloc "
       "device memory failed, size[32212254720], ret[207001], Device 6 may be other processes occupying this card, "
       "check as: ps -ef|grep python"),
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"\bEL0004\b|Memory_Allocation_Failure",
       "CANN error code EL0004 (Memory_Allocation_Failure), as quoted in PKU-YuanGroup/Helios#62 and "
       "hw-native-sys/PTOAS#341",
       "[PID: 210907] 2026-04-09-21:56:40.384.694 Memory_Allocation_Failure(EL0004): Failed to allocate memory "
       "requested by GE module."),
    _p(Cause.DEVICE_OUT_OF_MEMORY, r"rtMalloc execute failed, reason=\[driver error:out of memory\]",
       MS_DOCS_CANN + ", \"EE9999: On-Chip Video Memory Allocation Failure\"",
       "        rtMalloc execute failed, reason=[driver error:out of memory][FUNC:ReportError]"
       "[FILE:error_message_manage.cc][LINE:566]"),
    _p(Cause.PEER_FAILED, r"worker (?P<rank>\d+) is the first one timed out",
       MEASURED_CPU + ": the MindSpore scheduler's error when a worker stops sending heartbeats",
       "RuntimeError: The total number of timed out node is 1. Timed out node list is: [const vector]{1}, worker 1 "
       "is the first one timed out, please check its log."),
    _p(Cause.PEER_FAILED, r"The node: (?P<rank>\d+) is timed out",
       MEASURED_CPU + ": the MindSpore scheduler's log line (meta_server_node.cc) for a worker it lost",
       "[ERROR] DISTRIBUTED(3781,7f2ce759e6c0,python):2026-12-01-19:45:37.447.449 "
       "[mindspore/ccsrc/cluster/topology/meta_server_node.cc:548] UpdateTopoState] The node: 1 is timed out. It "
       "may exit with exception, please check this node's log."),
    _p(Cause.RANK_TABLE_REJECTED, r"\bEI0004\b|\bEI0014\b|Ranktable_Check_Failed|The IP is used repeatedly",
       HCCL_PARSER + ": EI0004 (\"The IP is used repeatedly.\"); newer CANN EI0014, quoted in CANN HIXL's guide",
       "Ranktable_Check_Failed(EI0014): The ranktable information check failed, Reason:[The IP is used repeatedly]."),
    _p(Cause.RANK_TABLE_REJECTED, r"\bip\[[^\]]*\] is not a valid ip address|\[(server_id|device_ip|super_pod_id)\]:"
                                  r"\[[^\]]*\] is already exist",
       HCCL_PARSER + ", HCCL_ERROR of CheckUniquePara and CheckUniqueAndInsertPool; as quoted in CANN HIXL's guide",
       "[ERROR] HCCL(...):... [topoinfo_ranktableParser.cc:522] ... [RanktableCheck] ... [device_ip]:[172.16.0.70] is "
       "already exist"),
    _p(Cause.HCCL_EXEC_TIMEOUT, r"\bEI0002\b|The wait execution of the Notify register times out",
       MS_DOCS_CANN + ", \"EI0002: notify wait timeout\"; vllm-project/vllm-ascend#3413",
       "EI0002: [PID: 2969] 2025-10-11-15:09:34.713.335 The wait execution of the Notify register times out. "
       "Reason: The Notify register has not received the Notify record from remote rank: [24]."),
    _p(Cause.HCCL_EXEC_TIMEOUT, r"Heartbeat Lost",
       MS_DOCS_CANN + ", \"EI0002: notify wait timeout\" (the abnormal-device list of the EI0002 message)",
       "        serverId[10.0.0.2], deviceId[0], Heartbeat Lost Occurred, Possible Reason: 1. Process has exited, "
       "2. Network Disconnected"),
    _p(Cause.HCCL_EXEC_TIMEOUT, r"\b(Ring \w+|Broadcast) wait (receiving|sending)\b.*failed|AllReduceCPUKernelMod "
                                r"launch failed",
       MEASURED_CPU + ": a CPU all-reduce whose peer stopped answering (the CPU's collective timeout; ring or "
       "reduce-broadcast algorithm)",
       "[ERROR] DISTRIBUTED(3784,7f824a7fc6c0,python):2026-12-01-19:45:37.694.987 "
       "[mindspore/ccsrc/cluster/rpc/core/collective_ops_impl.cc:162] RunRingAllReduce] Ring ReduceScatter wait "
       "receiving [1,13] failed."),
    _p(Cause.HCCL_CONNECT_TIMEOUT, r"\bEI0006\b|Getting socket times out",
       MS_DOCS_CANN + ", \"EI0006: Socket Build Timeout\"; vllm-project/afd-plugin#229",
       "EI0006: Getting socket times out. Reason: 1. The remote does not initiate a connect request. some NPUs in "
       "the cluster are abnormal."),
    _p(Cause.HCCL_CONNECT_TIMEOUT, r"wait socket establish timeout",
       "HCCL log of a link set-up timeout (hccl_socket_manager.cc), as quoted in vllm-project/vllm-ascend#1955",
       "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.194 [hccl_socket_manager.cc:778] "
       "[2734049][Wait][LinkEstablish]wait socket establish timeout, role[1] rank[12] timeout[120]"),
    _p(Cause.HCCL_CONNECT_TIMEOUT, r"Building networking for MS_(WORKER|SCHED) failed",
       MEASURED_CPU + ": a worker or the scheduler that could not form the cluster within MS_TOPO_TIMEOUT "
       "(scheduler unreachable, or a rank never registered)",
       "[ERROR] DISTRIBUTED(24458,7fa8cb06ab80,python):2026-12-01-19:41:26.028.855 "
       "[mindspore/ccsrc/cluster/topology/cluster_context.cc:94] Initialize] Building networking for MS_WORKER "
       "failed."),
    _p(Cause.HCCL_CONNECT_TIMEOUT, r"Failed to initialize distributed job cluster because some processes in the "
                                   r"cluster are not successfully spawned",
       MEASURED_CPU + ": the RuntimeError of mindspore.communication.init() when the cluster did not form",
       "RuntimeError: Failed to initialize distributed job cluster because some processes in the cluster are not "
       "successfully spawned. You can run command: 'grep -rn -E 'ERROR|CRITICAL' -C 10' in your log directory to "
       "filter out error info."),
)

# Log levels that describe progress, not the end: a retry logged as WARNING ("Failed to connect to the meta
# server node url" while the scheduler starts) must not decide the cause of a later, unrelated failure.
QUIET_LEVELS = ("[WARNING]", "[INFO]", "[DEBUG]", "[TRACE]", "[EVENT]")
ERROR_LINE = re.compile(r"error|exception|critical|fail|\bE[A-Z]\d{4}\b", re.IGNORECASE)


# MindSpore's glog header: `[ERROR] DISTRIBUTED(3781,7f2c...,python):2026-12-01-19:45:37.447.449 [file.cc:548] Fn] `
GLOG_HEADER = re.compile(r"^\[[A-Z]+\] [A-Z_]+\([^)]*\):\S+ \[[^\]]*\] ?\w*\] ")


def message_of(line: str) -> str:
    """A log line without MindSpore's glog header (level, module, pid, time, source): the message itself."""
    return GLOG_HEADER.sub("", line.strip())


@dataclass(frozen=True)
class Match:
    cause: Cause
    line: str
    rank: int | None = None  # the peer the line names, for PeerFailed


def classify(lines: Iterable[str]) -> Match | None:
    """The cause the most significant pattern of the table finds in these log lines, or None."""
    relevant = [line.rstrip() for line in lines if line.strip() and not line.lstrip().startswith(QUIET_LEVELS)]
    for pattern in PATTERNS:
        for line in reversed(relevant):
            found = pattern.regex.search(line)
            if found:
                rank = found.groupdict().get("rank")
                return Match(pattern.cause, message_of(line), int(rank) if rank is not None else None)
    return None


def last_error_line(lines: Sequence[str]) -> str | None:
    """The line an Unknown cause quotes: the last one that looks like an error (a Python exception line, a
    MindSpore [ERROR] line, a CANN error code), else the last non-empty one; never a WARNING/INFO line."""
    candidates = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith(QUIET_LEVELS)]
    for line in reversed(candidates):
        if ERROR_LINE.search(line) and not line.startswith(("Traceback", "File ")):
            return line
    return candidates[-1] if candidates else None


@dataclass(frozen=True)
class TerminationRecord:
    cause: str
    rank: int | None
    step: int | None  # the training step in progress (0: before the first step); None when not known
    detail: str

    def to_json(self) -> str:
        record = asdict(self)
        record["detail"] = _clip(" ".join(self.detail.split()))
        return json.dumps(record, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> TerminationRecord | None:
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(record, dict) or record.get("cause") not in {cause.value for cause in Cause}:
            return None
        rank, step = record.get("rank"), record.get("step")
        return cls(cause=record["cause"], rank=rank if isinstance(rank, int) else None,
                   step=step if isinstance(step, int) else None, detail=str(record.get("detail", "")))

    def exit_code(self) -> int:
        return EXIT_CODES[Cause(self.cause)]


def progress_record(rank: int | None, step: int) -> TerminationRecord:
    """What a worker leaves in its record file while it trains: its step, no cause yet (empty detail). A worker
    killed from outside (SIGKILL, or MindSpore's own SIGTERM after a failed collective) writes nothing more, and
    the launcher still knows the step it died in."""
    return TerminationRecord(Cause.UNKNOWN.value, rank, step, "")


def is_progress(record: TerminationRecord | None) -> bool:
    return record is not None and record.cause == Cause.UNKNOWN.value and not record.detail


class ProgressWriter:
    """Writes progress_record each step; gives up quietly (after saying so once) when the path is unwritable."""

    def __init__(self, path: str, rank: int | None, log=None):
        self.path, self.rank, self.log, self.working = path, rank, log, True

    def step(self, step: int) -> None:
        if self.working:
            self.working = write_record(self.path, progress_record(self.rank, step), self.log)

    def clear(self) -> None:
        """A run that succeeded leaves no termination message behind."""
        if self.working:
            try:
                with open(self.path, "w", encoding="utf-8"):
                    pass
            except OSError:
                pass


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_LIMIT else text[:DETAIL_LIMIT - 3] + "..."


def write_record(path: str, record: TerminationRecord, log=None) -> bool:
    """Write the record as the file's whole content, atomically: a temporary file renamed over the path. The
    kubelet's /dev/termination-log is a bind-mounted file that cannot be renamed over: under /dev (and for
    anything that is not a regular file) the line goes in with one write into the existing file, which the kubelet
    reads only after the container ended; a /dev path that does not exist is not created (no pod around it).
    Never raises: a trainer that cannot write its record still exits with the cause's code, and says why."""
    say = log or _stderr
    line = record.to_json() + "\n"
    try:
        if path.startswith("/dev/") or (os.path.exists(path) and not os.path.isfile(path)):
            if not os.path.exists(path):
                say(f"termination record not written: {path} does not exist (not in a Kubernetes pod?); it is: "
                    f"{line.strip()}")
                return False
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(line)
            return True
        handle, temporary = tempfile.mkstemp(prefix=".termination-", dir=os.path.dirname(os.path.abspath(path)))
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(line)
            os.replace(temporary, path)
        except OSError:
            os.unlink(temporary)
            raise
        return True
    except OSError as error:
        say(f"termination record not written to {path} ({error}); it is: {line.strip()}")
        return False


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def read_record(path: str) -> TerminationRecord | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return TerminationRecord.from_json(handle.read().strip())
    except OSError:
        return None


def record_for_exception(error: BaseException, rank: int | None, step: int | None) -> TerminationRecord:
    """A process's own end, from the exception that ends it: the trainer's own errors by type, MindSpore's (a
    RuntimeError whose text quotes the C++ or CANN message) by the pattern table, else Unknown with its last line."""
    kinds = ((ConfigError, Cause.CONFIG_ERROR), (DataError, Cause.DATA_ERROR),
             (RankTableTimeout, Cause.RANK_TABLE_TIMEOUT), (DivergenceError, Cause.NUMERICAL_DIVERGENCE))
    for kind, cause in kinds:
        if isinstance(error, kind):
            return TerminationRecord(cause.value, rank, getattr(error, "step", step), str(error))
    text = f"{type(error).__name__}: {error}"
    found = classify(text.splitlines())
    if found is not None:
        return TerminationRecord(found.cause.value, found.rank if found.cause == Cause.PEER_FAILED else rank, step,
                                 found.line)
    return TerminationRecord(Cause.UNKNOWN.value, rank, step, last_error_line(text.splitlines()) or text)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"code {returncode} (killed by {signal.Signals(-returncode).name})"
        except ValueError:
            return f"code {returncode} (killed by signal {-returncode})"
    return f"code {returncode}"


@dataclass
class Ended:
    """One process of the pod as the launcher saw it end."""

    name: str                      # "rank 3", "MindSpore scheduler"
    rank: int | None               # its global rank; None for the scheduler
    returncode: int
    order: float                   # when the launcher saw it end (smaller = earlier)
    stopped: bool = False          # the launcher stopped it after another process had failed
    record: TerminationRecord | None = None
    tail: list[str] = field(default_factory=list)
    oom_killed: bool = False       # the kernel's OOM killer ended it (cgroup memory.events)


def outcome(ended: Ended) -> TerminationRecord:
    """Why one process ended: its own record, refined by its stderr when the record (or its absence) leaves the
    cause unknown."""
    if ended.oom_killed:
        return TerminationRecord(Cause.DEVICE_OUT_OF_MEMORY.value, ended.rank,
                                 ended.record.step if ended.record else None,
                                 f"{ended.name} was killed by the kernel's OOM killer: the container ran out of "
                                 f"host memory (its memory limit)")
    record = ended.record
    step = record.step if record else None
    if is_progress(record):  # it died without saying why: only its step is known
        record = None
    if record is None and ended.returncode in CAUSE_OF_EXIT and CAUSE_OF_EXIT[ended.returncode] != Cause.UNKNOWN:
        record = TerminationRecord(CAUSE_OF_EXIT[ended.returncode].value, ended.rank, step,
                                   f"{ended.name} exited with {describe_exit(ended.returncode)}")
    if record is not None and record.cause != Cause.UNKNOWN.value:
        return record
    found = classify(ended.tail)
    if found is not None:
        rank = found.rank if found.cause == Cause.PEER_FAILED else ended.rank
        return TerminationRecord(found.cause.value, rank, step, found.line)
    if record is not None:
        return record
    last = last_error_line(ended.tail)
    return TerminationRecord(Cause.UNKNOWN.value, ended.rank, step,
                             f"{ended.name} exited with {describe_exit(ended.returncode)}" + (f": {last}" if last
                                                                                               else ""))


@dataclass(frozen=True)
class Verdict:
    record: TerminationRecord
    exit_code: int


def pod_verdict(ended: Sequence[Ended]) -> Verdict:
    """The pod's cause: the earliest failure that is not an echo (PeerFailed, a collective or connection timeout,
    or MindSpore's SIGTERM, which a rank gets when another rank died first). With echoes only, the lost peer is named when any
    process of the pod (the MindSpore scheduler, in pod 0) logged which rank was lost first; else the earliest
    echo stands. Processes the launcher stopped itself never count as failures, but their logs can name the peer."""
    failed = sorted((end for end in ended if end.returncode != 0 and not end.stopped), key=lambda end: end.order)
    if not failed:
        raise ValueError("no process of the pod failed")
    outcomes = [(end, outcome(end)) for end in failed]
    for end, record in outcomes:
        if not _is_echo(end, record):
            return Verdict(record, _exit_code(record, end))
    peer = next((record for _, record in outcomes if record.cause == Cause.PEER_FAILED.value), None)
    if peer is None:
        for end in sorted(ended, key=lambda end: end.order):
            found = classify(end.tail)
            if found is not None and found.cause == Cause.PEER_FAILED:
                peer = TerminationRecord(Cause.PEER_FAILED.value, found.rank, None, found.line)
                break
    first_end, first = outcomes[0]
    if peer is not None:
        detail = f"{first_end.name} ended after another rank was lost: {peer.detail}"
        if first.cause != Cause.PEER_FAILED.value:
            detail += f" (its own error: {first.detail})"
        # the scheduler knows no step: the pod's workers do, stopped ones too (their progress records)
        steps = [record.step for _, record in outcomes if record.step is not None]
        steps += [end.record.step for end in ended if end.record is not None and end.record.step is not None]
        record = TerminationRecord(Cause.PEER_FAILED.value, peer.rank, max(steps) if steps else None, detail)
        return Verdict(record, EXIT_CODES[Cause.PEER_FAILED])
    return Verdict(first, _exit_code(first, first_end))


def _is_echo(end: Ended, record: TerminationRecord) -> bool:
    """A cause a rank gets because another rank failed first. Besides the timeouts and PeerFailed, an Unknown end
    by a SIGTERM the launcher did not send: in a MindSpore dynamic cluster that is MindSpore stopping the workers
    after it lost a node (measured: rank 0 ended so ~30 s after its peer was SIGKILLed, with no error of its own)."""
    if record.cause in {echo.value for echo in ECHOES}:
        return True
    return record.cause == Cause.UNKNOWN.value and end.returncode == -signal.SIGTERM and not end.stopped


def _exit_code(record: TerminationRecord, end: Ended) -> int:
    if record.cause == Cause.UNKNOWN.value and end.returncode < 0:
        return 128 - end.returncode  # killed by a signal: the shell's 128 + s
    return record.exit_code()


OOM_EVENT_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def oom_kills(paths: Sequence[str] = OOM_EVENT_FILES) -> int | None:
    """The container cgroup's count of processes the OOM killer ended (cgroup v2 memory.events, v1
    memory.oom_control: both have an `oom_kill N` line), or None when neither is readable."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        except OSError:
            continue
    return None
