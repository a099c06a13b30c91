"""What ``GET /metrics`` shows, read from the store at scrape time (``monitor.exposition``
writes it out).

VC quota, use and queue length come from ``admin.describe_vcs``, the very figures ``yard
vc list`` shows; GPUs allocated are what unfinished tasks hold, as ``yard nodes`` counts
them; samples are the newest ones still fresh (``live.fresh_seconds``, as ``yard top`` counts them),
so that a node or task nobody samples any more drops out instead of showing stale figures.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row
from sqlalchemy.orm import Session

from trainyard.core.lifecycle import run_seconds
from trainyard.core.states import JobState
from trainyard.monitor.exposition import (
    ClusterFigures,
    GpuFigures,
    NodeFigures,
    RunningJobFigures,
    TaskFigures,
    VcFigures,
)
from trainyard.services.admin import describe_vcs
from trainyard.services.live import fresh_seconds
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries import nodes as node_queries


def cluster_figures(session: Session, now: datetime, monitor_interval_seconds: float) -> ClusterFigures:
    since = now - timedelta(seconds=fresh_seconds(monitor_interval_seconds))
    running = _running_jobs(session, now)
    return ClusterFigures(
        nodes=_nodes(session, since),
        vcs=_vcs(session, now),
        jobs_by_state={state.value: 0 for state in JobState} | job_queries.job_counts_by_state(session),
        running_jobs=running,
        tasks=_tasks(session, since, {job.job_id: job for job in running}),
    )


def _nodes(session: Session, since: datetime) -> list[NodeFigures]:
    allocated: dict[tuple[str, int], float] = {}
    for node, shares, _, _ in node_queries.unfinished_task_usage(session):
        for index, milli in shares:
            allocated[(node, index)] = allocated.get((node, index), 0.0) + milli / 1000
    samples = {row.node: row for row in metric_queries.latest_node_figures(session, since)}
    figures = []
    for name, gpus, schedulable in node_queries.node_gpus(session):
        total: dict[str, int] = {}
        held: dict[str, float] = {}
        for gpu in gpus:
            total[gpu["model"]] = total.get(gpu["model"], 0) + 1
            held[gpu["model"]] = held.get(gpu["model"], 0.0) + allocated.get((name, gpu["index"]), 0.0)
        sample = samples.get(name)
        figures.append(NodeFigures(
            name=name, up=schedulable and sample is not None, gpus_total=total, gpus_allocated=held,
            sampled_gpus=_sampled_gpus(sample), cpu_pct=sample.cpu_pct if sample else None,
            memory_used_mb=sample.memory_used_mb if sample else None,
            disk_used_pct=sample.disk_used_pct if sample else None,
        ))
    return figures


def _sampled_gpus(sample: Row[Any] | None) -> tuple[GpuFigures, ...]:
    if sample is None:
        return ()
    return tuple(
        GpuFigures(
            index=gpu["index"], model=gpu["model"],
            # A simulated GPU has no utilisation; should a sampler ever store one, it is not shown.
            util_pct=None if gpu.get("simulated") else gpu.get("util_pct"),
            memory_used_mb=gpu.get("memory_used_mb"), temperature_c=gpu.get("temperature_c"),
            power_w=gpu.get("power_w"), ecc_errors=gpu.get("ecc_errors"),
        )
        for gpu in sample.gpus
    )


def _vcs(session: Session, now: datetime) -> list[VcFigures]:
    oldest = job_queries.oldest_wait_by_vc(session)
    return [
        VcFigures(
            name=vc.name, quota=vc.quota, used=vc.used, borrowed=vc.borrowed, waiting=vc.waiting,
            oldest_wait_seconds=max(0.0, (now - oldest[vc.name]).total_seconds()) if vc.name in oldest else 0.0,
        )
        for vc in describe_vcs(session)
    ]


def _running_jobs(session: Session, now: datetime) -> list[RunningJobFigures]:
    spans: dict[int, tuple[str, str, list[tuple[datetime | None, datetime | None]]]] = {}
    for job_id, user, vc, start, end in job_queries.holding_job_attempt_spans(session):
        spans.setdefault(job_id, (user, vc, []))[2].append((start, end))
    return [
        RunningJobFigures(job_id=job_id, user=user, vc=vc, running_seconds=run_seconds(attempts, now) or 0.0)
        for job_id, (user, vc, attempts) in spans.items()
    ]


def _tasks(session: Session, since: datetime, running: dict[int, RunningJobFigures]) -> list[TaskFigures]:
    """The newest sample of each task of a running or stopping job (an ended job's last
    samples stay in the history, not on this page)."""
    figures = []
    for job_id, role, index, gpu_util_pct, gpu_memory_mb, cpu_cores, memory_mb in metric_queries.latest_task_figures(
        session, since
    ):
        job = running.get(job_id)
        if job is not None:
            figures.append(TaskFigures(
                job_id=job_id, user=job.user, vc=job.vc, role=role, index=index, gpu_util_pct=gpu_util_pct,
                gpu_memory_mb=gpu_memory_mb, cpu_cores=cpu_cores, memory_mb=memory_mb,
            ))
    return figures
