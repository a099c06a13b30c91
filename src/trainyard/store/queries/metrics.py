"""Queries of the monitoring history (``node_samples``, ``task_samples``): writing a round
of raw samples, reading the newest figures per node and per task, the running tasks a
round samples, reading the rows of a job, a task or a node over a window, and the rows
downsampling reads, writes and prunes.

``monitor/history.py`` owns what the rows mean (downsampling, retention, windows); this
module only reads and writes them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, Row, Select, delete, func, or_, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from trainyard.core.states import TaskState
from trainyard.store.rows import AttemptRow, NodeSampleRow, TaskRow, TaskSampleRow

RAW = 0  # the ``step`` of a raw sample
# Rows fetched at a time by the queries that read a row per node or task with JSON in it:
# fetched all at once, thousands of decoded lists and dicts live together, long enough for
# the garbage collector to promote them and then walk every object of the process.
STREAM_ROWS = 200

SampleRow = NodeSampleRow | TaskSampleRow


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


def _newest_node_samples(since: datetime, *what: Any, nodes: Collection[str] | None = None) -> Select[Any]:
    newest_query = (
        select(NodeSampleRow.node, func.max(NodeSampleRow.at).label("at"))
        .where(NodeSampleRow.step == RAW, NodeSampleRow.at >= since)
    )
    if nodes is not None:
        newest_query = newest_query.where(NodeSampleRow.node.in_(nodes))
    newest = newest_query.group_by(NodeSampleRow.node).subquery()
    return (
        select(*what)
        .join(newest, (NodeSampleRow.node == newest.c.node) & (NodeSampleRow.at == newest.c.at))
        # Implied by the join, but said for the planner: without it the outer side reads every
        # raw row (an hour's worth) rather than the last few rounds.
        .where(NodeSampleRow.step == RAW, NodeSampleRow.at >= since)
        .order_by(NodeSampleRow.node)
    )


def latest_node_samples(session: Session, since: datetime, nodes: Collection[str] | None = None
                        ) -> list[NodeSampleRow]:
    """Each node's (of ``nodes``; None: every node's) newest raw sample taken at or after
    ``since``, by node name."""
    return list(session.scalars(_newest_node_samples(since, NodeSampleRow, nodes=nodes)))


def latest_node_figures(session: Session, since: datetime) -> Iterator[Row[Any]]:
    """What ``/metrics`` shows of each node's newest raw sample (as ``latest_node_samples``):
    (node, cpu_pct, memory_used_mb, disk_used_pct, gpus) as plain rows, since a page about
    thousands of nodes cannot afford an ORM object per row. Rows come one at a time (read
    them while the session is open), each row's GPUs decoded as it comes: the caller keeps
    what it needs, not thousands of decoded dicts at once."""
    columns = (NodeSampleRow.node, NodeSampleRow.cpu_pct, NodeSampleRow.memory_used_mb,
               NodeSampleRow.disk_used_pct, NodeSampleRow.gpus)
    return iter(session.execute(_newest_node_samples(since, *columns).execution_options(yield_per=STREAM_ROWS)))


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
        .where(TaskSampleRow.step == RAW, TaskSampleRow.at >= since)  # for the planner, as above
        .order_by(TaskSampleRow.job_id, TaskSampleRow.role, TaskSampleRow.index)
    )


TASK_FIGURES = ("cpu_cores", "memory_mb", "gpus_held", "gpu_util_pct", "gpu_memory_mb",
                "disk_read_bytes_per_s", "disk_write_bytes_per_s")
NODE_FIGURES = ("cpu_pct", "load1", "memory_used_mb", "memory_total_mb", "disk_used_pct",
                "net_rx_bytes_per_s", "net_tx_bytes_per_s", "gpus")


def task_rows(
    session: Session, job_id: int, step: int, since: datetime, until: datetime,
    *, role: str | None = None, index: int | None = None,
) -> list[Row[Any]]:
    """A job's rows (or one task's) of ``step`` taken in ``[since, until]``, by time: plain
    rows (role, index, at, step and the figures), not entities, since a window reads thousands."""
    columns = [TaskSampleRow.role, TaskSampleRow.index, TaskSampleRow.at, TaskSampleRow.step,
               *(getattr(TaskSampleRow, f) for f in TASK_FIGURES)]
    query = _of_task_window(select(*columns), job_id, step, since, until, role, index)
    return list(session.execute(query.order_by(TaskSampleRow.at)))


def _of_task_window(
    query: Select[Any], job_id: int, step: int, since: datetime, until: datetime, role: str | None, index: int | None
) -> Select[Any]:
    """``query`` narrowed to a job's (or one task's) rows of ``step`` in ``[since, until]``."""
    query = query.where(
        TaskSampleRow.job_id == job_id, TaskSampleRow.step == step,
        TaskSampleRow.at >= since, TaskSampleRow.at <= until,
    )
    if role is not None:
        query = query.where(TaskSampleRow.role == role)
    if index is not None:
        query = query.where(TaskSampleRow.index == index)
    return query


def task_buckets(
    session: Session, job_id: int, step: int, since: datetime, until: datetime, width: int,
    *, role: str | None = None, index: int | None = None,
) -> tuple[list[tuple[Any, ...]], datetime | None]:
    """A job's rows (or one task's) of ``step`` in ``[since, until]`` summed in the database
    into ``width``-second buckets aligned on the epoch, for windows too long to read row by
    row: (role, index, bucket start in epoch seconds, then for each of ``TASK_FIGURES`` its
    sum and how many rows measured it); and the newest ``at`` read (None: no rows)."""
    epoch = _epoch_seconds(session, TaskSampleRow.at)
    bucket = epoch.op("/")(width).op("*")(width).label("bucket")  # integer division on both databases
    figures = [getattr(TaskSampleRow, f) for f in TASK_FIGURES]
    query = _of_task_window(select(
        TaskSampleRow.role, TaskSampleRow.index, bucket,
        *(agg for column in figures for agg in (func.sum(column), func.count(column))),
    ), job_id, step, since, until, role, index)
    newest = _aware(session.scalar(query.with_only_columns(func.max(TaskSampleRow.at))))
    if newest is None:
        return [], None
    return [tuple(r) for r in session.execute(query.group_by(TaskSampleRow.role, TaskSampleRow.index, bucket))], newest


def _epoch_seconds(session: Session, column: Any) -> Any:
    """``column`` (a time) as whole seconds since the epoch, in the session's database's SQL."""
    if session.get_bind().dialect.name == "postgresql":
        return sql_cast(func.floor(func.extract("epoch", column)), BigInteger)
    return sql_cast(func.strftime("%s", column), Integer)  # SQLite keeps times as UTC text


def node_rows(session: Session, node: str, step: int, since: datetime, until: datetime) -> list[Row[Any]]:
    """A node's rows of ``step`` taken in ``[since, until]``, by time, as ``task_rows``."""
    columns = [NodeSampleRow.at, NodeSampleRow.step, *(getattr(NodeSampleRow, f) for f in NODE_FIGURES)]
    query = select(*columns).where(
        NodeSampleRow.node == node, NodeSampleRow.step == step,
        NodeSampleRow.at >= since, NodeSampleRow.at <= until,
    )
    return list(session.execute(query.order_by(NodeSampleRow.at)))


def first_at(
    session: Session, table: type[SampleRow], step: int, *, at_or_after: datetime | None = None
) -> datetime | None:
    """When the oldest row of ``step`` (taken at or after ``at_or_after``) was taken; None: no such row."""
    query = select(func.min(table.at)).where(table.step == step)
    if at_or_after is not None:
        query = query.where(table.at >= at_or_after)
    return _aware(session.scalar(query))


def last_at(session: Session, table: type[SampleRow], step: int) -> datetime | None:
    """When the newest row of ``step`` was taken; None: there is none."""
    return _aware(session.scalar(select(func.max(table.at)).where(table.step == step)))


def rows_in(session: Session, table: type[SampleRow], step: int, start: datetime, end: datetime) -> list[SampleRow]:
    """The rows of ``step`` taken in ``[start, end)``, by time."""
    query = select(table).where(table.step == step, table.at >= start, table.at < end).order_by(table.at)
    return list(session.scalars(query))


def delete_older(session: Session, table: type[SampleRow], step: int, before: datetime) -> int:
    """Remove the rows of ``step`` taken before ``before``; how many went."""
    result = session.execute(delete(table).where(table.step == step, table.at < before))
    return int(getattr(result, "rowcount", 0) or 0)


def delete_other_steps(session: Session, table: type[SampleRow], steps: Collection[int], before: datetime) -> int:
    """Remove rows of steps not in ``steps`` (a retention since changed) taken before ``before``."""
    # As ranges between the steps kept, not NOT IN: ranges use the (step, at) index, where
    # NOT IN would read the whole table every minute.
    kept = sorted(set(steps))
    gaps = [table.step < kept[0], table.step > kept[-1]]
    gaps += [(table.step > low) & (table.step < high) for low, high in zip(kept, kept[1:], strict=False)]
    result = session.execute(delete(table).where(or_(*gaps), table.at < before))
    return int(getattr(result, "rowcount", 0) or 0)


def _aware(value: datetime | str | None) -> datetime | None:
    """min()/max() bypass the column's type: give their answer its UTC zone back."""
    if value is None:
        return None
    if isinstance(value, str):  # SQLite answers min()/max() of a datetime column as text
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
