"""Job traces for the queueing track: Microsoft Philly, and Trainyard's own job history.

Philly (Jeon et al., USENIX ATC'19; the table Pollux's artifact ships): columns
``timestamp`` (submit, ``YYYY-MM-DD HH:MM:SS``, UTC), ``duration`` (s), ``num_gpus``,
``cluster`` (the virtual cluster). Machine lists: ``machineId, number of GPUs, …``.

Trainyard's history is what ``GET /api/v1/jobs`` returns (``yard jobs --json``): pages
(``{"items": [...]}``) or lists of job summaries, one JSON document or one per line. Jobs
that ran and finished become trace jobs: submitted at ``submittedAt``, running
``finishedAt - startedAt``, on ``gpus`` GPUs, in ``vc``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainyard.core.resources import MILLI
from trainyard.scheduler.snapshot import GpuSlot, NodeState
from trainyard.sim.elastic import Elastic
from trainyard.sim.traces import open_text, resolve

NODE_CPU_MILLI = 1_000_000  # the queueing track schedules GPUs only: CPU and memory never bind
NODE_MEMORY_MB = 1 << 30


@dataclass(frozen=True)
class TraceJob:
    job_id: int
    submit: float  # seconds since the epoch
    duration: float  # seconds of running it needs
    gpus: int
    vc: str = "default"
    user: str = ""
    elastic: Elastic | None = None  # it may run on fewer or more workers (``sim.elastic``)


def parse_time(text: str) -> float:
    """``YYYY-MM-DD[ HH:MM[:SS]]`` or ISO 8601, taken as UTC → seconds since the epoch."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _csv_rows(path: Path | str, columns: set[str], what: str) -> Iterator[tuple[int, dict[str, str]]]:
    """Each row of the CSV file at ``path`` with its line number; ValueError naming the
    columns missing for ``what`` the file should be."""
    with open_text(path) as f:
        reader = csv.DictReader(f)
        missing = columns - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(sorted(missing))}; is this {what}?")
        yield from enumerate(reader, start=2)


def load_philly(path: Path | str) -> list[TraceJob]:
    jobs = []
    for line, row in _csv_rows(path, {"timestamp", "duration", "num_gpus", "cluster"}, "a Philly job table"):
        try:
            gpus = int(float(row["num_gpus"]))
            duration = float(row["duration"])
            submit = parse_time(row["timestamp"])
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
        if gpus > 0 and duration > 0:
            jobs.append(TraceJob(0, submit, duration, gpus, row["cluster"] or "default"))
    jobs.sort(key=lambda j: (j.submit, j.duration, j.gpus, j.vc))
    return [replace(j, job_id=i + 1) for i, j in enumerate(jobs)]


def load_history(path: Path | str) -> list[TraceJob]:
    text = Path(path).read_text()
    documents: list[Any] = []
    try:
        documents.append(json.loads(text))
    except json.JSONDecodeError:
        for line, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    documents.append(json.loads(raw))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line}: not JSON ({e.msg}); export with `yard jobs --json`") from None
    jobs = []
    for item in _items(documents):
        started, finished = item.get("startedAt"), item.get("finishedAt")
        gpus = float(item.get("gpus") or 0)
        if not started or not finished or gpus <= 0:
            continue  # never ran, still running, or CPU-only: nothing to replay
        duration = parse_time(finished) - parse_time(started)
        if duration > 0:
            whole = max(1, round(gpus)) if gpus >= 1 else 1
            jobs.append(TraceJob(int(item["id"]), parse_time(item["submittedAt"]), duration, whole,
                                 item.get("vc") or "default", item.get("user") or ""))
    return sorted(jobs, key=lambda j: (j.submit, j.job_id))


def _items(documents: Iterable[object]) -> Iterable[dict[str, Any]]:
    for doc in documents:
        if isinstance(doc, dict) and "items" in doc:
            yield from doc["items"]
        elif isinstance(doc, list):
            yield from (d for d in doc if isinstance(d, dict))
        elif isinstance(doc, dict) and "submittedAt" in doc:
            yield doc


def load_openb_jobs(path: Path | str) -> list[TraceJob]:
    """An openb pod list (Weng et al., ATC'23) as a queue of jobs with departures: each pod
    with GPUs that was deleted, submitted at ``creation_time``, running from
    ``scheduled_time`` (or its creation) to ``deletion_time`` (seconds). The queueing track
    counts whole GPUs: a pod asking for a fraction of one device takes a whole one here (the
    placement track is where fractions are measured); its GPU model (``gpu_spec``) and its
    CPU and memory are not kept. CPU-only pods, and pods never deleted, are left out."""
    jobs = []
    columns = {"num_gpu", "gpu_milli", "creation_time", "deletion_time"}
    for line, row in _csv_rows(path, columns, "an openb pod list"):
        try:
            num_gpu = int(row["num_gpu"] or 0)
            if num_gpu <= 0 or not row["deletion_time"]:
                continue
            created = float(row["creation_time"])
            began = float(row.get("scheduled_time") or created)
            duration = max(1.0, float(row["deletion_time"]) - max(began, created))
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
        jobs.append(TraceJob(line - 1, created, duration, num_gpu))
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return jobs


def window(jobs: Sequence[TraceJob], start: float | None, end: float | None, load: float = 1.0,
           max_jobs: int | None = None) -> list[TraceJob]:
    """Jobs submitted in [start, end), with inter-arrival times divided by ``load``."""
    chosen = [j for j in jobs if (start is None or j.submit >= start) and (end is None or j.submit < end)]
    if max_jobs is not None:
        chosen = chosen[:max_jobs]
    if not chosen or load == 1.0:
        return chosen
    if load <= 0:
        raise ValueError("--load must be positive")
    origin = chosen[0].submit
    return [replace(j, submit=origin + (j.submit - origin) / load) for j in chosen]


def uniform_cluster(nodes: int, gpus: int, model: str = "gpu") -> tuple[NodeState, ...]:
    return tuple(
        NodeState(f"n{i:04d}", NODE_CPU_MILLI, NODE_MEMORY_MB, tuple(GpuSlot(g, model, 0) for g in range(gpus)))
        for i in range(nodes)
    )


def parse_cluster(spec: str) -> tuple[NodeState, ...]:
    """``NxG`` (N nodes of G GPUs), ``philly`` (Philly's machines), ``openb`` (the openb GPU
    nodes' GPU counts), or a machine list CSV
    (``machineId, number of GPUs, …``)."""
    nodes, sep, gpus = spec.lower().partition("x")
    if sep and nodes.isdigit() and gpus.isdigit():
        return uniform_cluster(int(nodes), int(gpus))
    if spec == "openb":  # the openb GPU nodes, by their GPU counts (models: see ``load_openb_jobs``)
        from trainyard.sim.openb import load_nodes
        from trainyard.sim.traces import OPENB_NODES, trace_file

        return tuple(
            NodeState(n.name, NODE_CPU_MILLI, NODE_MEMORY_MB, tuple(GpuSlot(g.index, "gpu", 0) for g in n.gpus))
            for n in load_nodes(trace_file(*OPENB_NODES))
        )
    path = resolve("--cluster", spec)
    out = []
    with open_text(path) as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader)]
        try:
            name_at, gpus_at = header.index("machineId"), header.index("number of GPUs")
        except ValueError:
            raise ValueError(f"{path}: needs columns 'machineId' and 'number of GPUs'") from None
        for row in reader:
            count = int(row[gpus_at])
            out.append(NodeState(row[name_at].strip(), NODE_CPU_MILLI, NODE_MEMORY_MB,
                                 tuple(GpuSlot(g, "gpu", 0) for g in range(count))))
    return tuple(out)


def gang_tasks(gpus: int, largest_node: int) -> list[int]:
    """A job's GPUs split into tasks of at most one node's worth (milli-GPU per task)."""
    size = max(1, largest_node)
    full, rest = divmod(gpus, size)
    return [size * MILLI] * full + ([rest * MILLI] if rest else [])


def load_vc_nodes(path: Path | str) -> dict[str, float]:
    """Philly's nodes per VC (``vc,node num``), as shares for ``queue.vc_quotas``."""
    with open_text(path) as f:
        reader = csv.DictReader(f)
        if {"vc", "node num"} - set(reader.fieldnames or ()):
            raise ValueError(f"{path}: needs columns 'vc' and 'node num'")
        return {row["vc"]: float(row["node num"]) for row in reader}
