"""Pollux's workloads and application models (Qiao et al., "Pollux: Co-adaptive Cluster
Scheduling for Goodput-Optimized Deep Learning", OSDI'21), as jobs the simulator can resize.

The data are the artifact's (github.com/petuum/adaptdl, branch ``osdi21-artifact``,
``simulator/``), shipped under ``sim/data/traces/pollux`` (README.md there). A workload is
160 jobs (at load 1.0) of six applications, each with a submit time, a GPU count and a
global batch size: the "TunedJobs" Pollux gave Tiresias. An application is its measured
step times (``APP_step_times``: seconds per step by placement and per-GPU batch) and its
measured training run at each batch size (``APP_validation``: per epoch, the progress the
epoch ends at and the gradient's mean square and variance).

How a job is modelled, following the artifact's ``simulator.py`` and ``applications.py``:

* **Fixed global batch.** A job keeps its workload batch size B on any number of GPUs n
  (as Tiresias and Optimus ran them in the artifact, and as issue 34's real test does), so
  only throughput scaling matters. Pollux's own batch-size adaptation (AdaScale goodput,
  choosing B per allocation) is dropped.
* **Work.** Progress is counted in steps at the application's smallest batch size; a step
  at batch B makes ``gain = (var + sqr) / (var / (B / B0) + sqr)`` of it, with the
  gradient statistics of the epoch (interpolated between measured batch sizes, as the
  artifact does). The steps to the target are ``sum over epochs of Δprogress / gain``, for
  the epochs the artifact trains each application (``MAX_EPOCHS``; no target metric is set
  there); the work is those steps times B, in samples.
* **Throughput.** At n GPUs the batch is split as the artifact splits it (``micro_batches``:
  at most the application's largest per-GPU batch at once, gradient accumulation beyond;
  on one GPU a batch above B0 always takes two micro-batches or more), and a step takes the
  measured step time at that per-GPU batch, interpolated linearly between measured per-GPU
  batches, plus ``compute = step - sync`` per extra micro-batch. Throughput is B / step.
  Only packed placements are used (n GPUs on ceil(n / 4) nodes of 4: the artifact measured
  every placement up to 16 GPUs, and packed ones at 24, 32, 48 and 64); spread placements,
  which its data show slower, are not modelled.
* **Curve.** A job's curve is its throughput at the measured GPU counts (1 to 16, 24, 32,
  48, 64, up to its maximum), linearly interpolated between them and flat beyond the last.
  The artifact interpolates the unmeasured counts (17 to 63) in three dimensions (nodes,
  GPUs, per-GPU batch) instead.
* **Elastic range.** 1 to the artifact's own cap for a fixed-batch job (its Optimus
  policy's): B divided by the smallest per-GPU batch measured, at most 64 (what its Pollux
  policy allows); ``ncf`` never more than 1 (both policies pin it).

So a fixed-size job's ``duration`` is the artifact's own time for it but for the artifact's
rounding of each epoch to whole seconds (at most 2 %: 100 short epochs of cifar10). What a
simulator replaying these should also charge, as the artifact does: every allocation, the
first included, stalls the job ``RESCALE_DELAY_S``; it schedules every 60 s; the cluster is
16 nodes of 4 GPUs. ``published_mean_jct`` and ``published_job_jcts`` are the artifact's
results (the paper's Figure 8a) to compare with.

Philly jobs have no measured curve: ``linear_job`` gives one a throughput proportional to
its GPUs, so that at the trace's GPU count it runs the trace's duration.
"""

from __future__ import annotations

import csv
import functools
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainyard.sim.elastic import Elastic
from trainyard.sim.jobs import TraceJob
from trainyard.sim.traces import open_text, trace_file

FOLDER = "pollux"
APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BATCH = {"yolov3": 8}  # the artifact's overrides of the largest measured per-GPU batch
SINGLE_GPU = frozenset({"ncf"})  # its policies never give ncf more than one GPU
MAX_GPUS = 64
LOADS = (0.5, 1.0, 1.5, 2.0)
WORKLOADS = tuple(range(1, 9))
CLUSTER_NODES, GPUS_PER_NODE = 16, 4
RESCALE_DELAY_S = 30.0
SCHEDULING_INTERVAL_S = 60.0
LINEAR_MAX_FACTOR = 2  # a Philly job may grow to twice the GPUs it asked for (at most MAX_GPUS)


@dataclass(frozen=True)
class ThroughputCurve:
    """Throughput at the GPU counts measured, ascending from 1: linear between them, flat
    beyond the last."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        counts = [n for n, _ in self.points]
        if not counts or counts[0] != 1 or counts != sorted(set(counts)):
            raise ValueError(f"a throughput curve starts at 1 GPU and ascends: {counts}")
        if any(not v > 0 for _, v in self.points):
            raise ValueError("a throughput curve is positive")

    def at(self, gpus: int) -> float:
        if gpus < 1:
            raise ValueError(f"throughput at {gpus} GPUs: a job runs on 1 or more")
        (lo_n, lo_v) = self.points[0]
        for n, v in self.points:
            if n == gpus:
                return v
            if n > gpus:
                return lo_v + (v - lo_v) * (gpus - lo_n) / (n - lo_n)
            lo_n, lo_v = n, v
        return lo_v


@dataclass(frozen=True)
class ElasticJob:
    """A job that can run on ``min_gpus`` to ``max_gpus`` GPUs: ``work`` in the curve's
    units times seconds (samples for Pollux's jobs, GPU-seconds for linear ones)."""

    job_id: int
    name: str
    submit: float  # seconds from the workload's start (Pollux) or the epoch (Philly)
    application: str
    gpus: int  # the size the trace asks for: what a fixed-size replay gives it
    min_gpus: int
    max_gpus: int
    work: float
    curve: ThroughputCurve
    batch_size: int = 0  # the global batch, kept on every size (0: not known)
    vc: str = "default"

    def throughput(self, gpus: int) -> float:
        return self.curve.at(gpus)

    def duration(self, gpus: int) -> float:
        """Seconds of running on ``gpus`` GPUs throughout, start to end."""
        return self.work / self.throughput(gpus)

    def fixed(self) -> TraceJob:
        """The job as a fixed-size trace job at the size it asks for."""
        return TraceJob(self.job_id, self.submit, self.duration(self.gpus), self.gpus, self.vc)


@dataclass(frozen=True)
class Application:
    name: str
    # GPUs (packed) → (per-GPU batch, step s, sync s), ascending by per-GPU batch
    step_times: Mapping[int, tuple[tuple[int, float, float], ...]]
    # global batch → per epoch (progress at its end, gradient mean square, variance)
    validation: Mapping[int, tuple[tuple[float, float, float], ...]]

    @property
    def init_batch_size(self) -> int:
        return min(self.validation)

    @property
    def max_batch_size(self) -> int:
        return max(self.validation)

    @property
    def min_local_batch(self) -> int:
        return min(b for rows in self.step_times.values() for b, _, _ in rows)

    @property
    def max_local_batch(self) -> int:
        return MAX_LOCAL_BATCH.get(self.name) or max(b for rows in self.step_times.values() for b, _, _ in rows)

    def max_gpus(self, batch_size: int) -> int:
        if self.name in SINGLE_GPU:
            return 1
        return max(1, min(MAX_GPUS, batch_size // self.min_local_batch))

    def micro_batches(self, gpus: int, batch_size: int) -> tuple[int, int]:
        """(per-GPU batch of one pass, extra accumulation passes per step), as the
        artifact's ``Job.update_local_bsz`` splits a fixed batch."""
        local = math.ceil(batch_size / gpus - 1e-8)
        accumulate = math.ceil(local / self.max_local_batch - 1e-8) - 1
        if gpus == 1 and batch_size > self.init_batch_size:
            accumulate = max(1, accumulate)
        atomic = math.ceil(local / (accumulate + 1) - 1e-8)
        return min(atomic, int(self.max_batch_size / (gpus * (accumulate + 1)))), accumulate

    def step_time(self, gpus: int, batch_size: int) -> float | None:
        """Seconds per optimisation step of ``batch_size`` on ``gpus`` packed GPUs; None
        where the artifact measured no such per-GPU batch on that many GPUs."""
        rows = self.step_times.get(gpus)
        if not rows:
            return None
        atomic, accumulate = self.micro_batches(gpus, batch_size)
        for (b0, step0, sync0), (b1, step1, sync1) in zip(rows, rows[1:] + rows[-1:], strict=True):
            if b0 <= atomic <= b1:
                w = (atomic - b0) / (b1 - b0) if b1 > b0 else 0.0
                step, sync = step0 + (step1 - step0) * w, sync0 + (sync1 - sync0) * w
                return step + accumulate * (step - sync)
        return None

    def steps_to_target(self, batch_size: int) -> float:
        """Optimisation steps at ``batch_size`` to train the artifact's epochs."""
        if not self.init_batch_size <= batch_size <= self.max_batch_size:
            raise ValueError(f"{self.name}: batch size {batch_size} is outside the measured "
                             f"{self.init_batch_size}..{self.max_batch_size}")
        lower = max(b for b in self.validation if b <= batch_size)
        upper = min(b for b in self.validation if b >= batch_size)
        w = 0.0 if upper == lower else (batch_size - lower) / (upper - lower)
        scale = batch_size / self.init_batch_size
        steps, done = 0.0, 0.0
        for epoch in range(MAX_EPOCHS[self.name]):
            progress = min(rows[epoch][0] for rows in self.validation.values())
            sqr = self.validation[lower][epoch][1] * (1 - w) + self.validation[upper][epoch][1] * w
            var = self.validation[lower][epoch][2] * (1 - w) + self.validation[upper][epoch][2] * w
            gain = (var + sqr) / (var / scale + sqr)
            steps += (progress - done) / gain
            done = progress
        return steps

    def trained_batch(self, gpus: int, batch_size: int) -> int:
        """The batch a step on ``gpus`` GPUs actually trains: ``batch_size`` rounded by its
        split (bert's 384 on 6 GPUs trains 6 x 6 passes x 10 = 360)."""
        atomic, accumulate = self.micro_batches(gpus, batch_size)
        return gpus * (accumulate + 1) * atomic

    def curve(self, batch_size: int, max_gpus: int) -> ThroughputCurve:
        """Samples of ``batch_size`` per second at each measured GPU count up to
        ``max_gpus``: ``batch_size`` per step, slowed or sped by the steps the batch the
        split trains needs instead (so that work / throughput is the artifact's time)."""
        steps = self.steps_to_target(batch_size)
        points = []
        for gpus in sorted(n for n in self.step_times if n <= max_gpus):
            seconds, trained = self.step_time(gpus, batch_size), self.trained_batch(gpus, batch_size)
            if seconds is not None and self.init_batch_size <= trained <= self.max_batch_size:
                points.append((gpus, batch_size / seconds * steps / self.steps_to_target(trained)))
        return ThroughputCurve(tuple(points))


def application(name: str) -> Application:
    """One of ``APPLICATIONS``, read from the shipped traces (or ``$TRAINYARD_TRACES``)."""
    return _read_application(*_application_files(name))


def _application_files(name: str) -> tuple[str, Path, Path]:
    if name not in APPLICATIONS:
        raise ValueError(f"unknown Pollux application {name!r}; Pollux measured {', '.join(APPLICATIONS)}")
    return name, trace_file(FOLDER, f"{name}_step_times.csv"), trace_file(FOLDER, f"{name}_validation.csv")


@functools.lru_cache(maxsize=64)
def _job_model(name: str, step_path: Path, validation_path: Path,
               batch_size: int) -> tuple[int, float, ThroughputCurve]:
    """(most GPUs, work in samples, throughput curve) of a job of ``name`` at ``batch_size``:
    many jobs of a workload, and every workload, share a few."""
    app = _read_application(name, step_path, validation_path)
    top = app.max_gpus(batch_size)
    return top, app.steps_to_target(batch_size) * batch_size, app.curve(batch_size, top)


@functools.lru_cache(maxsize=len(APPLICATIONS))
def _read_application(name: str, step_path: Path, validation_path: Path) -> Application:
    steps: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for line, row in _rows(step_path, {"placement", "local_bsz", "step_time", "sync_time"}):
        placement = row["placement"]
        if not placement.isdigit():
            raise ValueError(f"{step_path}:{line}: placement {placement!r} is not GPUs per node")
        steps[sum(map(int, placement))].append(
            (_int(row, "local_bsz", step_path, line), _float(row, "step_time", step_path, line),
             _float(row, "sync_time", step_path, line)))
    runs: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for line, row in _rows(validation_path, {"batch_size", "epoch", "progress", "grad_sqr", "grad_var"}):
        batch = _int(row, "batch_size", validation_path, line)
        if _int(row, "epoch", validation_path, line) != len(runs[batch]):
            raise ValueError(f"{validation_path}:{line}: epochs of batch size {batch} are not in order from 0")
        runs[batch].append((_float(row, "progress", validation_path, line),
                            _float(row, "grad_sqr", validation_path, line),
                            _float(row, "grad_var", validation_path, line)))
    short = [b for b, rows in runs.items() if len(rows) < MAX_EPOCHS[name]]
    if not steps or not runs or short:
        raise ValueError(f"{validation_path}: {name} needs step times and {MAX_EPOCHS[name]} epochs per batch size")
    return Application(name, {n: tuple(sorted(rows)) for n, rows in sorted(steps.items())},
                       {b: tuple(rows) for b, rows in sorted(runs.items())})


def workload_path(workload: int, load: float = 1.0) -> Path:
    if workload not in WORKLOADS or load not in LOADS:
        raise ValueError(f"Pollux's workloads are 1-8 at loads {', '.join(map(str, LOADS))}; "
                         f"not workload {workload!r} at load {load!r}")
    return trace_file(FOLDER, f"load-{load:.1f}_workload-{workload}.csv")


def load_workload(workload: int | Path | str = 1, load: float = 1.0) -> list[ElasticJob]:
    """Pollux's workload ``workload`` (1-8) at ``load``, or a CSV laid out the same way
    (``name,time,application,num_replicas,batch_size``), as elastic jobs in submit order."""
    path = workload_path(workload, load) if isinstance(workload, int) else Path(workload)
    jobs: list[ElasticJob] = []
    files: dict[str, tuple[str, Path, Path]] = {}
    for line, row in _rows(path, {"name", "time", "application", "num_replicas", "batch_size"}):
        name = row["application"]
        gpus = _int(row, "num_replicas", path, line)
        batch = _int(row, "batch_size", path, line)
        submit = _float(row, "time", path, line)
        try:
            if name not in files:
                files[name] = _application_files(name)
            top, work, curve = _job_model(*files[name], batch)
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
        if not 1 <= gpus <= top or submit < 0:
            raise ValueError(f"{path}:{line}: {gpus} GPUs at time {submit}; {name} at batch {batch} runs on 1 to {top}")
        if curve.points[-1][0] < gpus:
            raise ValueError(f"{path}:{line}: {name} has no step time measured at batch {batch} on {gpus} GPUs")
        jobs.append(ElasticJob(len(jobs) + 1, row["name"], submit, name, gpus, 1, top, work, curve, batch))
    return sorted(jobs, key=lambda j: (j.submit, j.job_id))


def linear_job(job: TraceJob, max_gpus: int | None = None) -> ElasticJob:
    """A trace job (Philly's) with throughput proportional to its GPUs, from 1 to
    ``max_gpus`` (default: twice what it asked, at most 64, never below what it asked):
    on the trace's GPU count it runs the trace's duration."""
    top = max_gpus if max_gpus is not None else max(job.gpus, min(LINEAR_MAX_FACTOR * job.gpus, MAX_GPUS))
    if top < job.gpus:
        raise ValueError(f"job {job.job_id}: max_gpus {top} is below the {job.gpus} it asked for")
    points = ((1, 1.0),) if top == 1 else ((1, 1.0), (top, float(top)))
    return ElasticJob(job.job_id, str(job.job_id), job.submit, "linear", job.gpus, 1, top,
                      job.duration * job.gpus, ThroughputCurve(points), vc=job.vc)


@dataclass(frozen=True)
class PublishedJct:
    experiment: str  # results-jobload (Figure 8a), results-period (8b), results-inter (8c)
    setting: str  # e.g. pollux-1.0: policy and load
    workload: str  # workload-1 … workload-8, or MEAN
    avg_jct_s: float


def published_results() -> list[PublishedJct]:
    path = trace_file(FOLDER, "pollux_paper_results_avg_jct_s.csv")
    return [PublishedJct(row["experiment"], row["policy_or_setting"], row["workload"],
                         _float(row, "avg_jct_s", path, line))
            for line, row in _rows(path, {"experiment", "policy_or_setting", "workload", "avg_jct_s"})]


def published_mean_jct(policy: str, load: float = 1.0) -> float:
    """Pollux's published average JCT (s) over its 8 workloads: ``pollux``, ``tiresias`` or
    ``optimus`` at a load of ``LOADS``."""
    setting = f"{policy}-{load:.1f}"
    for r in published_results():
        if r.experiment == "results-jobload" and r.setting == setting and r.workload == "MEAN":
            return r.avg_jct_s
    raise ValueError(f"no published mean JCT for {policy!r} at load {load}; "
                     f"there are pollux, tiresias and optimus at loads {', '.join(map(str, LOADS))}")


def published_job_jcts(policy: str, load: float = 1.0, workload: int = 1) -> dict[str, float]:
    """Each job's JCT (s) in Pollux's published run of ``policy`` (``pollux``, ``tiresias``,
    ``optimus``) on ``workload`` at ``load``, by job name: for percentiles and makespans."""
    path = trace_file(FOLDER, "pollux_paper_results_jct_per_job.csv")
    jcts = _per_job_jcts(path).get((f"{policy}-{load:.1f}", f"workload-{workload}"))
    if jcts is None:
        raise ValueError(f"no published JCTs for {policy!r} on workload {workload} at load {load}; there are "
                         f"pollux, tiresias and optimus on workloads 1-8 at loads {', '.join(map(str, LOADS))}")
    return dict(jcts)


@functools.lru_cache(maxsize=2)
def _per_job_jcts(path: Path) -> dict[tuple[str, str], tuple[tuple[str, float], ...]]:
    runs: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for line, row in _rows(path, {"policy_or_setting", "workload", "name", "jct_s"}):
        runs[row["policy_or_setting"], row["workload"]].append((row["name"], _float(row, "jct_s", path, line)))
    return {key: tuple(jobs) for key, jobs in runs.items()}


def _rows(path: Path, required: set[str]) -> list[tuple[int, dict[str, str]]]:
    with open_text(path) as f:
        reader = csv.DictReader(f)
        missing = required - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        return list(enumerate(reader, start=2))


def _float(row: dict[str, str], column: str, path: Path, line: int) -> float:
    try:
        value = float(row[column])
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{path}:{line}: {column} {row[column]!r} is not a number")
    return value


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    value = _float(row, column, path, line)
    if value != int(value):
        raise ValueError(f"{path}:{line}: {column} {row[column]!r} is not a whole number")
    return int(value)


MINIMUMS = ("asked", "half", "least")  # an elastic job's minimum, by what it asked (``as_trace_job``)


def as_trace_job(job: ElasticJob, elastic: bool = True, low: str = "asked") -> TraceJob:
    """The job for the queue simulator: its fixed size's duration, and (``elastic``) its
    range and throughput curve (``sim.elastic``), so it may grow and shrink; its minimum is
    the size it asked for (``low="asked"``: it only grows beyond it, into idle GPUs), half of
    it (``"half"``), or its application's least (``"least"``: as small as it runs)."""
    if low not in MINIMUMS:
        raise ValueError(f"an elastic job's minimum is one of {', '.join(MINIMUMS)}; got {low!r}")
    least = {"asked": job.gpus, "half": max(job.min_gpus, job.gpus // 2), "least": job.min_gpus}[low]
    model = Elastic(least, max(least, job.max_gpus), job.curve.points) if elastic else None
    return TraceJob(job.job_id, job.submit, job.duration(job.gpus), job.gpus, job.vc, elastic=model)
