"""Queries of the monitoring history (``node_samples``, ``task_samples``): writing a round
of raw samples, and reading the newest figures per node and per task.

``monitor/history.py`` owns what the rows mean (downsampling, retention, windows); this
module only reads and writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.store.rows import NodeSampleRow, TaskSampleRow

RAW = 0  # the ``step`` of a raw sample


def add_samples(session: Session, nodes: Sequence[NodeSampleRow], tasks: Sequence[TaskSampleRow]) -> None:
    """Store one round of samples."""
    session.add_all([*nodes, *tasks])


def latest_node_samples(session: Session, since: datetime) -> list[NodeSampleRow]:
    """Each node's newest raw sample taken at or after ``since``, by node name."""
    newest = (
        select(NodeSampleRow.node, func.max(NodeSampleRow.at).label("at"))
        .where(NodeSampleRow.step == RAW, NodeSampleRow.at >= since)
        .group_by(NodeSampleRow.node)
        .subquery()
    )
    query = (
        select(NodeSampleRow)
        .join(newest, (NodeSampleRow.node == newest.c.node) & (NodeSampleRow.at == newest.c.at))
        .where(NodeSampleRow.step == RAW)
        .order_by(NodeSampleRow.node)
    )
    return list(session.scalars(query))


def latest_task_samples(session: Session, since: datetime) -> list[TaskSampleRow]:
    """Each task's newest raw sample taken at or after ``since`` (one per job, attempt,
    role and index), by job then task."""
    key = (TaskSampleRow.job_id, TaskSampleRow.attempt, TaskSampleRow.role, TaskSampleRow.index)
    newest = (
        select(*key, func.max(TaskSampleRow.at).label("at"))
        .where(TaskSampleRow.step == RAW, TaskSampleRow.at >= since)
        .group_by(*key)
        .subquery()
    )
    query = (
        select(TaskSampleRow)
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
    return list(session.scalars(query))
