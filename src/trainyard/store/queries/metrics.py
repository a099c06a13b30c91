"""Queries of the monitoring history (``node_samples``, ``task_samples``) and of each node's
and task's newest sample (``node_latest``, ``task_latest``): writing a round of raw samples
and the newest figures, reading those per node and per task, the running tasks a round
samples, reading the rows of a job, a task or a node over a window, and the rows
downsampling reads, writes and prunes.

``monitor/history.py`` owns what the rows mean (downsampling, retention, windows); this
module only reads and writes them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, Row, Select, Table, delete, func, or_, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from trainyard.core.states import TaskState
from trainyard.store.rows import (
    AttemptRow,
    NodeLatestRow,
    NodeSampleRow,
    TaskLatestRow,
    TaskRow,
    TaskSampleRow,
    latest_gpu_lists,
)

RAW = 0  # the ``step`` of a raw sample
# Rows fetched at a time by the queries that read a row per node or task with JSON in it:
# fetched all at once, thousands of decoded lists and dicts live together, long enough for
# the garbage collector to promote them and then walk every object of the process.
STREAM_ROWS = 200

SampleRow = NodeSampleRow | TaskSampleRow


def add_samples(session: Session, nodes: Sequence[NodeSampleRow], tasks: Sequence[TaskSampleRow]) -> None:
    """Store one round of samples: the raw rows of the history, and each node's and task's
    newest figures (``NodeLatestRow``, ``TaskLatestRow``), which the newest of its samples
    replaces (a round written late, older than what is there, changes nothing)."""
    session.add_all([*nodes, *tasks])
    _upsert(session, NodeLatestRow, ("node",), [
        {"node": n.node, "at": n.at, **{f: getattr(n, f) for f in _NODE_LATEST}, "gpus": latest_gpu_lists(n.gpus)}
        for n in nodes
    ])
    _upsert(session, TaskLatestRow, _TASK_KEY, [
        {"node": t.node, "at": t.at, **{f: getattr(t, f) for f in (*_TASK_KEY, *_TASK_LATEST)}} for t in tasks
    ])


_NODE_LATEST = ("cpu_pct", "load1", "memory_used_mb", "memory_total_mb", "disk_used_pct",
                "net_rx_bytes_per_s", "net_tx_bytes_per_s")
_TASK_KEY = ("job_id", "attempt", "role", "index")
_TASK_LATEST = ("cpu_cores", "memory_mb", "gpus_held", "gpu_util_pct", "gpu_memory_mb",
                "disk_read_bytes_per_s", "disk_write_bytes_per_s")


def _upsert(
    session: Session, table: type[NodeLatestRow | TaskLatestRow], keys: Sequence[str], rows: list[dict[str, Any]]
) -> None:
    """Insert ``rows``, or update the row of the same ``keys`` (its primary key) where the new one is not older."""
    newest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:  # one row per key in a statement (PostgreSQL refuses to update a row twice in one)
        key = tuple(row[k] for k in keys)
        if key not in newest or newest[key]["at"] <= row["at"]:
            newest[key] = row
    if not newest:
        return
    rows = list(newest.values())
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    columns = cast(Table, table.__table__)
    statement = insert(columns)  # the table's, not the ORM's bulk insert, which costs twice as much a row
    session.execute(statement.on_conflict_do_update(
        index_elements=keys,
        set_={name: statement.excluded[name] for name in rows[0] if name not in keys},
        where=columns.c.at <= statement.excluded.at,
    ), rows)


def running_tasks(session: Session) -> list[tuple[TaskRow, int]]:
    """The tasks the store holds running, each with its attempt's number, by job then task."""
    query = (
        select(TaskRow, AttemptRow.number)
        .join(AttemptRow, TaskRow.attempt_id == AttemptRow.id)
        .where(TaskRow.state == TaskState.RUNNING)
        .order_by(TaskRow.job_id, TaskRow.role, TaskRow.index)
    )
    return [(task, number) for task, number in session.execute(query)]


def latest_node_samples(session: Session, since: datetime, nodes: Collection[str] | None = None
                        ) -> list[NodeLatestRow]:
    """Each node's (of ``nodes``; None: every node's) newest raw sample, where it was taken
    at or after ``since``, by node name."""
    query = select(NodeLatestRow).where(NodeLatestRow.at >= since)
    if nodes is not None:
        query = query.where(NodeLatestRow.node.in_(nodes))
    return list(session.scalars(query.order_by(NodeLatestRow.node)))


def latest_node_figures(session: Session, since: datetime) -> Iterator[Row[Any]]:
    """What ``/metrics`` shows of each node's newest raw sample (as ``latest_node_samples``):
    (node, cpu_pct, memory_used_mb, disk_used_pct, gpus) as plain rows, since a page about
    thousands of nodes cannot afford an ORM object per row; ``gpus`` as ``NodeLatestRow``
    keeps them. Rows come a few hundred at a time (read them while the session is open): the
    caller keeps what it needs, not thousands of decoded lists at once."""
    query = (
        select(NodeLatestRow.node, NodeLatestRow.cpu_pct, NodeLatestRow.memory_used_mb,
               NodeLatestRow.disk_used_pct, NodeLatestRow.gpus)
        .where(NodeLatestRow.at >= since)
        .order_by(NodeLatestRow.node)
    )
    return iter(session.execute(query.execution_options(yield_per=STREAM_ROWS)))


def latest_task_samples(session: Session, since: datetime) -> list[TaskLatestRow]:
    """Each task's newest raw sample (one per job, attempt, role and index), where it was
    taken at or after ``since``, by job then task."""
    query = select(TaskLatestRow).where(TaskLatestRow.at >= since)
    return list(session.scalars(query.order_by(TaskLatestRow.job_id, TaskLatestRow.role, TaskLatestRow.index)))


def latest_task_figures(session: Session, since: datetime) -> list[tuple[Any, ...]]:
    """What ``/metrics`` shows of each task's newest raw sample (as ``latest_task_samples``):
    (job_id, role, index, gpu_util_pct, gpu_memory_mb, cpu_cores, memory_mb) as plain rows."""
    t = TaskLatestRow
    query = (
        select(t.job_id, t.role, t.index, t.gpu_util_pct, t.gpu_memory_mb, t.cpu_cores, t.memory_mb)
        .where(t.at >= since)
        .order_by(t.job_id, t.role, t.index)
    )
    return cast(list[tuple[Any, ...]], list(session.execute(query)))


def delete_latest_older(session: Session, before: datetime) -> int:
    """Remove the newest-sample rows of nodes and tasks last sampled before ``before`` (ended
    tasks, nodes gone or silent); how many went."""
    removed = 0
    for table in (NodeLatestRow, TaskLatestRow):
        result = session.execute(delete(table).where(table.at < before))
        removed += int(getattr(result, "rowcount", 0) or 0)
    return removed


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
