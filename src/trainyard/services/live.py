"""The live view of the cluster: each node's and each running job's newest samples, beside
what is allocated (``GET /nodes``, ``GET /top``, ``yard top``, ``yard nodes``).

A sample counts as live while it is fresher than ``FRESH_INTERVALS`` sampling intervals;
an older one says nothing about now, so its figures are shown as not measured (null,
"n/a") rather than as stale numbers.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from trainyard.core.states import JobState
from trainyard.schemas.cluster import JobUsageView, NodeView, TopView
from trainyard.services import jobs as job_service
from trainyard.services.views import job_usage_view, node_view
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import NodeRow, TaskLatestRow, TaskRow, UserRow

FRESH_INTERVALS = 3  # a missed round or two is not yet "no data"


def fresh_seconds(monitor_interval_seconds: float) -> float:
    """How old a sample may be and still describe now."""
    return FRESH_INTERVALS * monitor_interval_seconds


def live_nodes(session: Session, viewer: UserRow, now: datetime, monitor_interval_seconds: float) -> list[NodeView]:
    """Every node with its allocation and its newest fresh sample; a non-admin sees every
    node's figures but only their own jobs' ids."""
    tasks = job_service.active_tasks(session)
    visible = job_service.visible_job_ids(session, viewer, {t.job_id for t in tasks})
    since = now - timedelta(seconds=fresh_seconds(monitor_interval_seconds))
    return _nodes(session, job_service.list_nodes(session), tasks, visible, since)


def node_page(session: Session, viewer: UserRow, now: datetime, monitor_interval_seconds: float, *,
              first: int, count: int) -> tuple[list[NodeView], int]:
    """``count`` nodes by name from position ``first`` (from 0), as ``live_nodes`` shows them,
    and how many nodes there are: a page of a large cluster reads only its own nodes' tasks
    and samples."""
    rows, total = node_queries.nodes_page(session, first, count)
    names = [n.name for n in rows]
    tasks = node_queries.unfinished_tasks(session, names)
    visible = job_service.visible_job_ids(session, viewer, {t.job_id for t in tasks})
    since = now - timedelta(seconds=fresh_seconds(monitor_interval_seconds))
    return _nodes(session, rows, tasks, visible, since, names), total


def _nodes(session: Session, rows: list[NodeRow], tasks: list[TaskRow], visible: set[int] | None,
           since: datetime, names: list[str] | None = None) -> list[NodeView]:
    samples = {s.node: s for s in metric_queries.latest_node_samples(session, since, names)}
    # Each node's own tasks, found once: matching every task against every node is
    # nodes x tasks comparisons (2 s for 1,000 nodes and 2,000 tasks).
    by_node: dict[str, list[TaskRow]] = {}
    for task in tasks:
        by_node.setdefault(task.node, []).append(task)
    return [node_view(n, by_node.get(n.name, []), visible, samples.get(n.name)) for n in rows]


def top(session: Session, viewer: UserRow, now: datetime, monitor_interval_seconds: float) -> TopView:
    """Nodes as ``live_nodes`` shows them, and the running jobs ``viewer`` may see (an admin:
    all) with their tasks' live figures, the busiest GPUs first; jobs with no GPU
    utilisation measured (simulated GPUs, no fresh sample) come after, by GPUs held."""
    fresh = fresh_seconds(monitor_interval_seconds)
    since = now - timedelta(seconds=fresh)
    tasks = job_service.active_tasks(session)
    visible = job_service.visible_job_ids(session, viewer, {t.job_id for t in tasks})
    nodes = _nodes(session, job_service.list_nodes(session), tasks, visible, since)
    jobs = job_queries.jobs_by_ids(session, sorted({t.job_id for t in tasks if visible is None or t.job_id in visible}))
    samples: dict[tuple[int, int, str, int], TaskLatestRow] = {
        (s.job_id, s.attempt, s.role, s.index): s for s in metric_queries.latest_task_samples(session, since)
    }
    by_job: dict[int, list[TaskRow]] = {}
    for task in tasks:
        by_job.setdefault(task.job_id, []).append(task)
    views: list[JobUsageView] = []
    for job in jobs.values():
        if job.state != JobState.RUNNING:
            continue
        own = by_job[job.id]
        found = [samples[k] for k in ((job.id, job.attempt, t.role, t.index) for t in own) if k in samples]
        views.append(job_usage_view(job, own, found, now))
    views.sort(key=lambda v: (v.gpuUtilPct is None, -(v.gpuUtilPct or 0.0), -v.gpus, v.id))
    return TopView(at=now, freshSeconds=fresh, nodes=nodes, jobs=views)
