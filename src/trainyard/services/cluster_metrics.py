"""What ``GET /metrics`` shows, read from the store at scrape time (``monitor.exposition``
writes it out).

VC quota, use and queue length come from ``admin.describe_vcs``, the very figures ``yard
vc list`` shows; GPUs allocated are what unfinished tasks hold, as ``yard nodes`` counts
them; samples are the newest ones still fresh (``live.fresh_seconds``, as ``yard top`` counts them),
so that a node or task nobody samples any more drops out instead of showing stale figures;
they are read from the one row per node and task that each monitoring round updates
(``node_latest``, ``task_latest``), not searched for in the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from trainyard.core.lifecycle import run_seconds
from trainyard.core.states import JobState
from trainyard.monitor.exposition import (
    ClusterFigures,
    DatasetCacheFigures,
    NodeFigures,
    RunningJobFigures,
    TaskFigures,
    VcFigures,
)
from trainyard.services.admin import describe_vcs
from trainyard.services.datasets import node_caches
from trainyard.services.live import fresh_seconds
from trainyard.services.server import Server
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.queries.nodes import NodeGpus
from trainyard.store.queries.vcs import HeldShares


def figures_now(server: Server) -> ClusterFigures:
    """What ``GET /metrics`` shows now, in a unit of work of its own; the nodes' dataset
    caches (read from their files by the backend) outside it."""
    caches = [DatasetCacheFigures(c.node, c.capacity_bytes, c.used_bytes, c.hits, c.misses, c.bytes_fetched,
                                  c.evictions, [(e.dataset, e.version, e.size) for e in c.entries],
                                  c.fetch_failures)
              for c in node_caches(server.backend)]
    with server.db.session() as session:
        figures = cluster_figures(session, server.clock.now(), server.monitor_interval_seconds)
    return replace(figures, dataset_caches=caches) if caches else figures


def cluster_figures(session: Session, now: datetime, monitor_interval_seconds: float) -> ClusterFigures:
    since = now - timedelta(seconds=fresh_seconds(monitor_interval_seconds))
    # Read once each and shared: the nodes' GPUs (totals per node, and the capacity VC
    # quotas are worked out from), and what unfinished tasks hold (per node, and per VC).
    inventory = node_queries.node_gpus(session)
    held = vc_queries.held_gpu_shares(session)
    running = _running_jobs(session, now)
    return ClusterFigures(
        nodes=_nodes(session, since, inventory, held),
        vcs=_vcs(session, now, held, _capacity(inventory)),
        jobs_by_state={state.value: 0 for state in JobState} | job_queries.job_counts_by_state(session),
        running_jobs=running,
        tasks=_tasks(session, since, {job.job_id: job for job in running}),
    )


def _capacity(inventory: Sequence[NodeGpus]) -> dict[str, int]:
    """GPUs per model in the whole cluster (as ``node_queries.gpus_by_model`` counts them)."""
    capacity: dict[str, int] = {}
    for node in inventory:
        for _, model in node.gpus:
            capacity[model] = capacity.get(model, 0) + 1
    return capacity


def _nodes(
    session: Session, since: datetime, inventory: Sequence[NodeGpus], held: Sequence[HeldShares]
) -> list[NodeFigures]:
    allocated: dict[tuple[str, int], float] = {}
    for node, _, _, shares, _ in held:
        for index, milli in shares:
            allocated[(node, index)] = allocated.get((node, index), 0.0) + milli / 1000
    # The GPUs as decoded: a list each, laid out as ``GpuFigures`` (``LATEST_GPU_FIELDS``).
    samples = {
        row.node: (row.cpu_pct, row.memory_used_mb, row.disk_used_pct, row.gpus)
        for row in metric_queries.latest_node_figures(session, since)
    }
    figures = []
    for name, gpus, schedulable in inventory:
        total: dict[str, int] = {}
        taken: dict[str, float] = {}
        for index, model in gpus:
            total[model] = total.get(model, 0) + 1
            taken[model] = taken.get(model, 0.0) + allocated.get((name, index), 0.0)
        sample = samples.get(name)
        if sample is None:
            figures.append(NodeFigures(name=name, up=False, gpus_total=total, gpus_allocated=taken))
            continue
        cpu_pct, memory_used_mb, disk_used_pct, sampled_gpus = sample
        figures.append(NodeFigures(
            name=name, up=schedulable, gpus_total=total, gpus_allocated=taken, sampled_gpus=sampled_gpus,
            cpu_pct=cpu_pct, memory_used_mb=memory_used_mb, disk_used_pct=disk_used_pct,
        ))
    return figures


def _vcs(session: Session, now: datetime, held: Sequence[HeldShares], capacity: dict[str, int]) -> list[VcFigures]:
    oldest = job_queries.oldest_wait_by_vc(session)
    return [
        VcFigures(
            name=vc.name, quota=vc.quota, used=vc.used, borrowed=vc.borrowed, waiting=vc.waiting,
            opportunistic=vc.opportunistic,
            oldest_wait_seconds=max(0.0, (now - oldest[vc.name]).total_seconds()) if vc.name in oldest else 0.0,
            borrow_limit=vc.borrowLimit, weight=vc.weight,
        )
        for vc in describe_vcs(session, held=held, capacity=capacity)
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
                job_id=job_id, user=job.user, vc=job.vc, role=role, task_index=index, gpu_util_pct=gpu_util_pct,
                gpu_memory_mb=gpu_memory_mb, cpu_cores=cpu_cores, memory_mb=memory_mb,
            ))
    return figures
