"""Queries of the monitoring history (``node_samples``, ``task_samples``): writing a round
of raw samples, reading the newest figures per node and per task, and the running tasks
a round samples.

``monitor/history.py`` owns what the rows mean (downsampling, retention, windows); this
module only reads and writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, Select, func, select
from sqlalchemy.orm import Session

from trainyard.core.states import TaskState
from trainyard.store.rows import AttemptRow, NodeSampleRow, TaskRow, TaskSampleRow

RAW = 0  # the ``step`` of a raw sample


def add_samples(session: Session, nodes: Sequence[NodeSampleRow], tasks: Sequence[TaskSampleRow]) -> None:
    """Store one round of samples."""
    session.add_all([*nodes, *tasks])


def running_tasks(session: Session) -> list[tuple[TaskRow, int]]:
    """The tasks the store holds running, each with its attempt's number, by job then task."""
    query = (
        select(TaskRow, AttemptRow.number)
        .join(AttemptRow, TaskRow.attempt_id == AttemptRow.id)
        .where(TaskRow.state == TaskState.RUNNING)
        .order_by(TaskRow.job_id, TaskRow.role, TaskRow.index)
    )
    return [(task, number) for task, number in session.execute(query)]


def _newest_node_samples(since: datetime, *what: Any) -> Select[Any]:
    newest = (
        select(NodeSampleRow.node, func.max(NodeSampleRow.at).label("at"))
        .where(NodeSampleRow.step == RAW, NodeSampleRow.at >= since)
        .group_by(NodeSampleRow.node)
        .subquery()
    )
    return (
        select(*what)
        .join(newest, (NodeSampleRow.node == newest.c.node) & (NodeSampleRow.at == newest.c.at))
        .where(NodeSampleRow.step == RAW)
        .order_by(NodeSampleRow.node)
    )


def latest_node_samples(session: Session, since: datetime) -> list[NodeSampleRow]:
    """Each node's newest raw sample taken at or after ``since``, by node name."""
    return list(session.scalars(_newest_node_samples(since, NodeSampleRow)))


def latest_node_figures(session: Session, since: datetime) -> list[Row[Any]]:
    """What ``/metrics`` shows of each node's newest raw sample (as ``latest_node_samples``):
    (node, cpu_pct, memory_used_mb, disk_used_pct, gpus) as plain rows, since a page about
    thousands of nodes cannot afford an ORM object per row."""
    columns = (NodeSampleRow.node, NodeSampleRow.cpu_pct, NodeSampleRow.memory_used_mb,
               NodeSampleRow.disk_used_pct, NodeSampleRow.gpus)
    return list(session.execute(_newest_node_samples(since, *columns)))


def latest_task_samples(session: Session, since: datetime) -> list[TaskSampleRow]:
    """Each task's newest raw sample taken at or after ``since`` (one per job, attempt,
    role and index), by job then task."""
    return list(session.scalars(_newest_task_samples(since, TaskSampleRow)))


def latest_task_figures(session: Session, since: datetime) -> list[tuple[Any, ...]]:
    """What ``/metrics`` shows of each task's newest raw sample (as ``latest_task_samples``):
    (job_id, role, index, gpu_util_pct, gpu_memory_mb, cpu_cores, memory_mb) as plain rows."""
    columns = (TaskSampleRow.job_id, TaskSampleRow.role, TaskSampleRow.index, TaskSampleRow.gpu_util_pct,
               TaskSampleRow.gpu_memory_mb, TaskSampleRow.cpu_cores, TaskSampleRow.memory_mb)
    return cast(list[tuple[Any, ...]], list(session.execute(_newest_task_samples(since, *columns))))


def _newest_task_samples(since: datetime, *what: Any) -> Select[Any]:
    key = (TaskSampleRow.job_id, TaskSampleRow.attempt, TaskSampleRow.role, TaskSampleRow.index)
    newest = (
        select(*key, func.max(TaskSampleRow.at).label("at"))
        .where(TaskSampleRow.step == RAW, TaskSampleRow.at >= since)
        .group_by(*key)
        .subquery()
    )
    return (
        select(*what)
        .join(
            newest,
            (TaskSampleRow.job_id == newest.c.job_id)
            & (TaskSampleRow.attempt == newest.c.attempt)
            & (TaskSampleRow.role == newest.c.role)
            & (TaskSampleRow.index == newest.c.index)
            & (TaskSampleRow.at == newest.c.at),
        )
        .where(TaskSampleRow.step == RAW)
        .order_by(TaskSampleRow.job_id, TaskSampleRow.role, TaskSampleRow.index)
    )
