"""Prometheus exposition: the cluster's figures as the text format that ``GET /metrics`` serves.

Two kinds of metric end up on one page:

1. **Read from the store at scrape time** (``ClusterFigures``, gathered by
   ``services/cluster_metrics.py``): GPUs per node and model, the newest node, GPU and task
   samples, VC quota and use, jobs by state, queues, running jobs. No figure is kept in
   memory between scrapes (only decoded JSON, keyed by its stored text:
   ``store/queries/decoded.py``), so every server process answers the same, and a restart
   loses nothing.
2. **Observed in the controller's process** (``ControllerTimings``): the scheduler's cycle
   duration and the submit-to-start latency, as ``prometheus_client`` histograms.

The first kind is written by ``write_families`` rather than by ``prometheus_client``'s
``generate_latest``: that function costs about 4 µs per sample (170 ms for the 40,000 GPU
samples of 1,000 eight-GPU nodes on the development machine), which alone would break the
100 ms target for such a cluster (``benchmarks/bench_metrics_exposition.py``). The writer
keeps the library's text format exactly (labels sorted by name, the same escaping, the
library's ``floatToGoString`` for values); the tests read its output back with
``prometheus_client``'s parser and lint it with ``promtool check metrics``.

Names follow Prometheus conventions: the ``trainyard_`` prefix, base units (bytes,
seconds, ratios 0-1), and a figure nobody measured (a simulated GPU's utilisation) is
absent, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.utils import floatToGoString

MIB = 1024 * 1024
# The library's own formatting of a value (Go's float syntax, +Inf, NaN); it is untyped there.
go_float = cast(Callable[[float], str], floatToGoString)
# The text format 0.0.4, which both ``write_families`` and ``generate_latest`` write.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds; a cycle is usually milliseconds, a busy one with thousands of jobs up to seconds.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds from submission to the first task running: from an idle cluster's instant start
# to a day in the queue.
START_LATENCY_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)


# -- the figures read from the store ----------------------------------------------------------


# The figures made per GPU, task and running job are named tuples, not frozen dataclasses:
# a scrape of 1,000 nodes makes 8,000 of them, and a frozen dataclass costs twice as much
# to build (``benchmarks/bench_metrics_exposition.py``).


class GpuFigures(NamedTuple):
    """One device: its model, and its newest sample's figures (None: not measured; a
    simulated GPU's utilisation is not shown). The fields are those of ``store.rows.
    LATEST_GPU_FIELDS``, in that order, so that a node's GPUs serve as the store's newest
    sample holds them, decoded (a list each): building 8,000 of these per scrape cost more
    than decoding them."""

    gpu_index: int  # not ``index``, which a tuple has already
    model: str
    memory_total_mb: int | None = None
    util_pct: float | None = None
    memory_used_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_errors: int | None = None
    simulated: bool = False
    healthy: bool = True


@dataclass(frozen=True)
class NodeFigures:
    name: str
    up: bool  # schedulable (not cordoned) and sampled recently
    gpus_total: dict[str, int]  # per GPU model
    gpus_allocated: dict[str, float]  # per GPU model, fractions of shared devices included
    # From the newest sample (each a ``GpuFigures`` or a sequence laid out as one); empty when none is recent.
    sampled_gpus: Sequence[Sequence[Any]] = ()
    cpu_pct: float | None = None
    memory_used_mb: int | None = None
    disk_used_pct: float | None = None


@dataclass(frozen=True)
class VcFigures:
    name: str
    quota: dict[str, int]  # GPUs guaranteed per model, as ``yard vc list`` shows them
    used: float
    borrowed: float
    waiting: int
    oldest_wait_seconds: float  # 0 when nothing waits
    borrow_limit: int | None = None  # GPUs of each model it may borrow (None: no limit)
    weight: float = 1.0
    opportunistic: float = 0.0  # GPUs its oppo jobs hold


class RunningJobFigures(NamedTuple):
    job_id: int
    user: str
    vc: str
    running_seconds: float


class TaskFigures(NamedTuple):
    job_id: int
    user: str
    vc: str
    role: str
    task_index: int
    gpu_util_pct: float | None
    gpu_memory_mb: int | None
    cpu_cores: float | None
    memory_mb: int | None


class DatasetCacheFigures(NamedTuple):
    """One node's dataset cache (issue 35): its size, counters since it was made, contents."""

    node: str
    capacity_bytes: int
    used_bytes: int
    hits: int
    misses: int
    bytes_fetched: int
    evictions: int
    entries: Sequence[tuple[str, str, int]]  # (dataset, version, bytes)
    fetch_failures: int = 0


@dataclass(frozen=True)
class ClusterFigures:
    nodes: Sequence[NodeFigures] = ()
    vcs: Sequence[VcFigures] = ()
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    running_jobs: Sequence[RunningJobFigures] = ()
    tasks: Sequence[TaskFigures] = ()
    dataset_caches: Sequence[DatasetCacheFigures] = ()


# -- the text format ---------------------------------------------------------------------------


def escape_label_value(value: str) -> str:
    """The text format's escaping of a label value (as ``prometheus_client`` does it)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def labels(**values: str | int) -> str:
    """``name="value",...`` sorted by name, ready to put between braces."""
    return ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(values.items()))


@dataclass
class Family:
    """One metric family: its samples, each written out as its line of the page when added.

    A line is a string, which the garbage collector does not track; a (labels, value) tuple
    per sample kept to be written later made 56,000 tracked objects per scrape of 1,000
    nodes, and the collections they set off cost more than writing the lines.
    """

    name: str
    kind: str  # gauge | untyped
    help: str
    lines: list[str] = field(default_factory=list)

    def add(self, rendered_labels: str, value: float | None) -> None:
        """Add a sample; a value nobody measured (None) is left out, not shown as 0."""
        if value is not None:
            text = format_value(value)
            self.lines.append(f"{self.name}{{{rendered_labels}}} {text}\n" if rendered_labels
                              else f"{self.name} {text}\n")


def format_value(value: float) -> str:
    """``floatToGoString``, with shortcuts for the common cases: a finite value below 1e6,
    where it is ``repr``; and a whole number of bytes (an ``int``, up to 2**53, which a float
    holds exactly), whose exponent form it writes from the digits, skipping the library's
    float round trip (a page has one per GPU and task; ``tests/monitor/test_exposition.py``
    checks both against the library)."""
    if 0 <= value < 1e6:
        return repr(float(value))
    if type(value) is int and 0 < value < 2**53:
        # Go's form of a large number: one digit, a point, the rest without trailing zeros.
        digits = str(value)
        return f"{(digits[0] + '.' + digits[1:]).rstrip('0.')}e+{len(digits) - 1:02d}"
    return go_float(value)


def write_families(families: Iterable[Family]) -> str:
    help_escape = str.maketrans({"\\": r"\\", "\n": r"\n"})
    out: list[str] = []
    for family in families:
        out.append(f"# HELP {family.name} {family.help.translate(help_escape)}\n# TYPE {family.name} {family.kind}\n")
        out.extend(family.lines)
    return "".join(out)


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100


def _bytes(mb: int | float | None) -> float | None:
    return None if mb is None else mb * MIB


def node_families(nodes: Sequence[NodeFigures]) -> list[Family]:
    # A count that can fall (a node leaves) is a gauge, but the agreed name ends in _total,
    # which promtool's lint reserves for counters: "untyped" (read as a gauge) keeps both.
    total = Family("trainyard_gpus_total", "untyped", "GPUs on the node, per model")
    allocated = Family("trainyard_gpus_allocated", "gauge",
                       "GPUs allocated to unfinished tasks, per node and model (a shared device counts as fractions)")
    util = Family("trainyard_gpu_utilization_ratio", "gauge",
                  "Busy time of the GPU over the last sample period, 0-1; absent for simulated GPUs")
    memory = Family("trainyard_gpu_memory_used_bytes", "gauge", "GPU memory in use")
    temperature = Family("trainyard_gpu_temperature_celsius", "gauge", "GPU temperature")
    power = Family("trainyard_gpu_power_watts", "gauge", "GPU power draw")
    ecc = Family("trainyard_gpu_ecc_uncorrected_errors", "gauge", "Uncorrected ECC errors of the GPU (volatile count)")
    up = Family("trainyard_node_up", "gauge", "1 when the node is schedulable and was sampled recently, else 0")
    cpu = Family("trainyard_node_cpu_utilization_ratio", "gauge", "Busy share of all the node's CPUs, 0-1")
    node_memory = Family("trainyard_node_memory_used_bytes", "gauge", "Memory in use on the node")
    disk = Family("trainyard_node_disk_used_ratio", "gauge",
                  "Used share of the file system holding Trainyard's state, 0-1")
    models: dict[str, str] = {}  # escaped once: a cluster has a few models and thousands of GPUs
    for node in nodes:
        # Labels written out in name order (as ``labels`` would), each value escaped once:
        # a cluster has thousands of GPUs, and this loop is most of the page.
        name = escape_label_value(node.name)
        node_label = f'node="{name}"'
        for model, count in sorted(node.gpus_total.items()):
            by_model = f'model="{escape_label_value(model)}",{node_label}'
            total.add(by_model, count)
            allocated.add(by_model, node.gpus_allocated.get(model, 0.0))
        for index, model, _, util_pct, memory_used_mb, temperature_c, power_w, ecc_errors, simulated, _ in (
            node.sampled_gpus
        ):
            device = f'gpu="{index}",{node_label}'
            if util_pct is not None and not simulated:
                escaped = models.get(model) or models.setdefault(model, escape_label_value(model))
                util.add(f'gpu="{index}",model="{escaped}",{node_label}', util_pct / 100)
            memory.add(device, _bytes(memory_used_mb))
            temperature.add(device, temperature_c)
            power.add(device, power_w)
            ecc.add(device, ecc_errors)
        up.add(node_label, 1 if node.up else 0)
        cpu.add(node_label, _ratio(node.cpu_pct))
        node_memory.add(node_label, _bytes(node.memory_used_mb))
        disk.add(node_label, _ratio(node.disk_used_pct))
    return [total, allocated, util, memory, temperature, power, ecc, up, cpu, node_memory, disk]


def vc_families(vcs: Sequence[VcFigures]) -> list[Family]:
    quota = Family("trainyard_vc_quota_gpus", "gauge", "GPUs the VC is guaranteed, per model ('*': any model)")
    used = Family("trainyard_vc_used_gpus", "gauge", "GPUs held by the VC's guaranteed work within its quota")
    borrowed = Family("trainyard_vc_borrowed_gpus", "gauge",
                      "GPUs the VC's guaranteed jobs hold beyond its quota, on other VCs' idle GPUs (borrowed work)")
    opportunistic = Family("trainyard_vc_opportunistic_gpus", "gauge", "GPUs the VC's opportunistic (oppo) jobs hold")
    borrow_limit = Family("trainyard_vc_borrow_limit_gpus", "gauge",
                          "GPUs of each model the VC may borrow beyond its quota (only VCs with a limit)")
    weight = Family("trainyard_vc_weight", "gauge", "The VC's weight: its share of idle GPUs against other borrowers")
    queue = Family("trainyard_queue_length", "gauge", "Jobs waiting in the VC's queue")
    oldest = Family("trainyard_queue_oldest_wait_seconds", "gauge",
                    "How long the VC's longest-waiting job has waited (0 when none waits)")
    for vc in vcs:
        vc_label = labels(vc=vc.name)
        for model, gpus in sorted(vc.quota.items()):
            quota.add(labels(model=model, vc=vc.name), gpus)
        used.add(vc_label, vc.used)
        borrowed.add(vc_label, vc.borrowed)
        opportunistic.add(vc_label, vc.opportunistic)
        if vc.borrow_limit is not None:
            borrow_limit.add(vc_label, vc.borrow_limit)
        weight.add(vc_label, vc.weight)
        queue.add(vc_label, vc.waiting)
        oldest.add(vc_label, vc.oldest_wait_seconds)
    return [quota, used, borrowed, opportunistic, borrow_limit, weight, queue, oldest]


def job_families(jobs_by_state: dict[str, int], running: Sequence[RunningJobFigures]) -> list[Family]:
    jobs = Family("trainyard_jobs", "gauge", "Jobs by state")
    for state, count in sorted(jobs_by_state.items()):
        jobs.add(labels(state=state), count)
    seconds = Family("trainyard_job_running_seconds", "gauge",
                     "How long a running job has run, its attempts summed (waiting time not counted)")
    escaped: dict[str, str] = {}  # users and VCs repeat across jobs: escape each once
    for job_id, user, vc, running_seconds in running:
        user, vc = (escaped.get(v) or escaped.setdefault(v, escape_label_value(v)) for v in (user, vc))
        seconds.add(f'job="{job_id}",user="{user}",vc="{vc}"', running_seconds)
    return [jobs, seconds]


def task_families(tasks: Sequence[TaskFigures]) -> list[Family]:
    util = Family("trainyard_task_gpu_utilization_ratio", "gauge",
                  "Mean busy time of the GPUs the task holds, 0-1; absent for simulated GPUs")
    memory = Family("trainyard_task_gpu_memory_used_bytes", "gauge", "GPU memory used by the task's processes")
    cpu = Family("trainyard_task_cpu_cores", "gauge", "CPU cores the task's processes keep busy (1 = one core)")
    task_memory = Family("trainyard_task_memory_used_bytes", "gauge", "Memory (RSS) of the task's processes")
    escaped: dict[str, str] = {}  # users, VCs and roles repeat across tasks: escape each once
    for task in tasks:
        role, user, vc = (escaped.get(v) or escaped.setdefault(v, escape_label_value(v))
                          for v in (task.role, task.user, task.vc))
        task_label = f'index="{task.task_index}",job="{task.job_id}",role="{role}",user="{user}",vc="{vc}"'
        util.add(task_label, _ratio(task.gpu_util_pct))
        memory.add(task_label, _bytes(task.gpu_memory_mb))
        cpu.add(task_label, task.cpu_cores)
        task_memory.add(task_label, _bytes(task.memory_mb))
    return [util, memory, cpu, task_memory]


def dataset_cache_families(caches: Sequence[DatasetCacheFigures]) -> list[Family]:
    """Each node's dataset cache; none where the backend keeps no cache."""
    if not caches:
        return []
    capacity = Family("trainyard_dataset_cache_capacity_bytes", "gauge", "The most the node's dataset cache holds")
    used = Family("trainyard_dataset_cache_used_bytes", "gauge", "Bytes of datasets in the node's cache")
    hits = Family("trainyard_dataset_cache_hits_total", "counter", "Tasks that found their dataset in the cache")
    misses = Family("trainyard_dataset_cache_misses_total", "counter",
                    "Datasets fetched into the cache (for a task, or ahead of a waiting job)")
    fetched = Family("trainyard_dataset_cache_fetched_bytes_total", "counter",
                     "Bytes read from the datasets' sources (an archive's as sent, compressed)")
    evictions = Family("trainyard_dataset_cache_evictions_total", "counter",
                       "Datasets removed to make room (least recently used, mounted by no running task)")
    failures = Family("trainyard_dataset_cache_fetch_failures_total", "counter",
                      "Fetches that failed (a source's error, a dataset too big; their bytes count as fetched)")
    entries = Family("trainyard_dataset_cache_entry_bytes", "gauge", "Bytes of one dataset version in the cache")
    for cache in caches:
        node = labels(node=cache.node)
        for family, value in ((capacity, cache.capacity_bytes), (used, cache.used_bytes), (hits, cache.hits),
                              (misses, cache.misses), (fetched, cache.bytes_fetched), (evictions, cache.evictions),
                              (failures, cache.fetch_failures)):
            family.add(node, value)
        for dataset, version, size in cache.entries:
            entries.add(labels(dataset=dataset, node=cache.node, version=version), size)
    return [capacity, used, hits, misses, fetched, evictions, failures, entries]


def cluster_families(figures: ClusterFigures) -> list[Family]:
    return [
        *node_families(figures.nodes),
        *vc_families(figures.vcs),
        *job_families(figures.jobs_by_state, figures.running_jobs),
        *task_families(figures.tasks),
        *dataset_cache_families(figures.dataset_caches),
    ]


# -- what the controller observes -------------------------------------------------------------


class ControllerTimings:
    """The histograms the controller observes in its own process.

    Each instance has its own registry (not ``prometheus_client``'s global one), so that
    several servers or controllers in one process, as in the tests, count apart.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.cycle = Histogram(
            "trainyard_scheduler_cycle_duration_seconds",
            "Time of one scheduling cycle: snapshot, scheduler, writing its decisions",
            buckets=CYCLE_BUCKETS, registry=self.registry,
        )
        self.start_latency = Histogram(
            "trainyard_job_start_latency_seconds",
            "Time from a job's submission to its first task running (observed once per job)",
            buckets=START_LATENCY_BUCKETS, registry=self.registry,
        )

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def render(figures: ClusterFigures, timings: ControllerTimings | None) -> str:
    """The whole ``/metrics`` page; without a controller in this process, the histograms are
    absent rather than shown empty."""
    page = write_families(cluster_families(figures))
    return page + (timings.text() if timings is not None else "")
