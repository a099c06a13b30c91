"""The monitoring history: rounds of samples from the backend, kept in the store.

``record`` turns a round (``core.metrics.Sampled``) into raw rows, and keeps each node's
and task's newest figures beside them (the rows the live views and ``/metrics`` read).
``maintain`` downsamples them by the retention (``core/retention.py``: raw for an hour,
per-minute averages for a day, per-10-minute averages for 30 days by default) and removes
what is older than each tier keeps (a newest-figures row: what the raw tier keeps); the
controller runs it every minute. ``task_history`` and ``node_history`` read a window at the
finest resolution that covers it, at most ``MAX_POINTS`` points per series.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core.metrics import NodeSample, Sampled, TaskSample
from trainyard.core.retention import RetentionTier
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries.metrics import SampleRow
from trainyard.store.rows import NodeSampleRow, TaskSampleRow


def node_row(sample: NodeSample) -> NodeSampleRow:
    gpus = [{k: v for k, v in asdict(g).items() if k != "pids"} for g in sample.gpus]
    return NodeSampleRow(
        node=sample.node, at=sample.at, step=metric_queries.RAW, cpu_pct=sample.cpu_pct, load1=sample.load1,
        memory_used_mb=sample.memory_used_mb, memory_total_mb=sample.memory_total_mb,
        disk_used_pct=sample.disk_used_pct, net_rx_bytes_per_s=sample.net_rx_bytes_per_s,
        net_tx_bytes_per_s=sample.net_tx_bytes_per_s, gpus=gpus,
    )


def task_row(sample: TaskSample) -> TaskSampleRow:
    return TaskSampleRow(
        job_id=sample.job_id, attempt=sample.attempt, role=sample.role, index=sample.index, node=sample.node,
        at=sample.at, step=metric_queries.RAW, cpu_cores=sample.cpu_cores, memory_mb=sample.memory_mb,
        gpus_held=sample.gpus_held, gpu_util_pct=sample.gpu_util_pct, gpu_memory_mb=sample.gpu_memory_mb,
        disk_read_bytes_per_s=sample.disk_read_bytes_per_s, disk_write_bytes_per_s=sample.disk_write_bytes_per_s,
    )


def record(session: Session, sampled: Sampled) -> None:
    """Store one round of samples as raw rows, and as each node's and task's newest figures."""
    metric_queries.add_samples(session, [node_row(n) for n in sampled.nodes], [task_row(t) for t in sampled.tasks])


# --- Downsampling and retention -------------------------------------------------------------

# A bucket is averaged only once this long has passed since its end, so that a round of
# samples taken just before the end and written just after is in it.
SETTLE = timedelta(seconds=30)
CHUNK_BUCKETS = 60  # buckets read and written per query, to bound memory on a long backlog
TABLES: tuple[type[SampleRow], ...] = (TaskSampleRow, NodeSampleRow)


@dataclass(frozen=True)
class Maintained:
    """What one ``maintain`` did: rows written per step, rows removed."""

    written: dict[int, int]
    removed: int


def maintain(session: Session, now: datetime, tiers: Sequence[RetentionTier]) -> Maintained:
    """Downsample every tier from the one before it, then remove what is older than each keeps.

    Idempotent: a tier's bucket is written once, when it is complete (``SETTLE`` after its
    end), and the next run starts after the newest bucket written, so running it again
    writes nothing twice. Averaging goes before pruning, and the retention's rules (each
    tier kept at least twice the next one's step) keep every row until its bucket is done.
    """
    written: dict[int, int] = {}
    for finer, coarser in zip(tiers, tiers[1:], strict=False):
        written[coarser.step] = sum(
            downsample(session, table, finer.step, coarser.step, now - SETTLE) for table in TABLES
        )
    removed = 0
    steps = [t.step for t in tiers]
    for table in TABLES:
        for tier in tiers:
            before = now - timedelta(seconds=tier.keep_seconds)
            removed += metric_queries.delete_older(session, table, tier.step, before)
        removed += metric_queries.delete_other_steps(
            session, table, steps, now - timedelta(seconds=max(t.keep_seconds for t in tiers))
        )
    # A node's or task's newest sample goes when the raw history would no longer hold it
    # (the task ended, the node went or fell silent): as searching the raw rows found it.
    removed += metric_queries.delete_latest_older(session, now - timedelta(seconds=tiers[0].keep_seconds))
    return Maintained(written, removed)


def downsample(session: Session, table: type[SampleRow], source: int, step: int, complete_by: datetime) -> int:
    """Average the ``source``-step rows of ``table`` into ``step``-second buckets that ended
    by ``complete_by`` and are not written yet; how many rows were written."""
    newest = metric_queries.last_at(session, table, step)
    start = newest + timedelta(seconds=step) if newest is not None else metric_queries.first_at(session, table, source)
    if start is None:
        return 0
    start, end = bucket_start(start, step), bucket_start(complete_by, step)
    written = 0
    while start < end:
        chunk_end = min(end, start + timedelta(seconds=step * CHUNK_BUCKETS))
        rows = metric_queries.rows_in(session, table, source, start, chunk_end)
        if not rows:  # a gap (the server was down): skip to the next row rather than walk it
            following = metric_queries.first_at(session, table, source, at_or_after=chunk_end)
            if following is None:
                break
            start = max(chunk_end, bucket_start(following, step))
            continue
        buckets: dict[tuple[Any, ...], list[SampleRow]] = defaultdict(list)
        for row in rows:
            buckets[(*series_key(row), bucket_start(row.at, step))].append(row)
        averaged = [averaged_row(members, key[-1], step) for key, members in buckets.items()]
        session.add_all(averaged)
        session.flush()
        written += len(averaged)
        start = chunk_end
    return written


def bucket_start(at: datetime, step: int) -> datetime:
    """The start of the ``step``-second bucket (aligned on the epoch) that holds ``at``."""
    seconds = at.timestamp()
    return datetime.fromtimestamp(seconds - seconds % step, UTC)


def series_key(row: SampleRow) -> tuple[Any, ...]:
    if isinstance(row, TaskSampleRow):
        return (row.job_id, row.attempt, row.role, row.index)
    return (row.node,)


def averaged_row(rows: Sequence[SampleRow], at: datetime, step: int) -> SampleRow:
    """One row of ``step`` at ``at`` that averages ``rows`` (of one series)."""
    last = rows[-1]
    if isinstance(last, TaskSampleRow):
        return TaskSampleRow(job_id=last.job_id, attempt=last.attempt, role=last.role, index=last.index,
                             node=last.node, at=at, step=step, **task_means(rows))
    return NodeSampleRow(node=last.node, at=at, step=step, **node_means(rows))


TASK_FLOATS = ("cpu_cores", "gpus_held", "gpu_util_pct", "disk_read_bytes_per_s", "disk_write_bytes_per_s")
TASK_INTS = ("memory_mb", "gpu_memory_mb")
NODE_FLOATS = ("cpu_pct", "load1", "disk_used_pct", "net_rx_bytes_per_s", "net_tx_bytes_per_s")
NODE_INTS = ("memory_used_mb", "memory_total_mb")
GPU_FLOATS = ("util_pct", "temperature_c", "power_w")


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of what was measured; None (n/a) when nothing was."""
    measured = [v for v in values if v is not None]
    return sum(measured) / len(measured) if measured else None


def rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


def task_means(items: Sequence[Any]) -> dict[str, Any]:
    """The averages of a task's figures over ``items`` (rows or points with the same fields)."""
    means: dict[str, Any] = {f: mean(getattr(i, f) for i in items) for f in TASK_FLOATS}
    means.update({f: rounded(mean(getattr(i, f) for i in items)) for f in TASK_INTS})
    means["gpus_held"] = means["gpus_held"] or 0.0
    return means


def node_means(items: Sequence[Any]) -> dict[str, Any]:
    """The averages of a node's figures over ``items`` (rows or points), its GPUs by index."""
    means: dict[str, Any] = {f: mean(getattr(i, f) for i in items) for f in NODE_FLOATS}
    means.update({f: rounded(mean(getattr(i, f) for i in items)) for f in NODE_INTS})
    by_index: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        for gpu in item.gpus:
            by_index[gpu["index"]].append(gpu)
    means["gpus"] = [gpu_means(by_index[i]) for i in sorted(by_index)]
    return means


def gpu_means(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """One GPU over a bucket: mean figures, the most ECC errors seen, healthy only if always."""
    gpu = dict(samples[-1])
    gpu.update({f: mean(s.get(f) for s in samples) for f in GPU_FLOATS})
    gpu["memory_used_mb"] = rounded(mean(s.get("memory_used_mb") for s in samples))
    errors = [s["ecc_errors"] for s in samples if s.get("ecc_errors") is not None]
    gpu["ecc_errors"] = max(errors) if errors else None
    gpu["healthy"] = all(s.get("healthy", True) for s in samples)
    return gpu


# --- Windows --------------------------------------------------------------------------------

MAX_POINTS = 500  # per series: a chart or a sparkline needs no more


# The fields after ``at`` are in the order of ``metric_queries.TASK_FIGURES`` (and NodePoint's
# of ``NODE_FIGURES``): a point is made from a row's columns as they come.
@dataclass(frozen=True)
class TaskPoint:
    at: datetime
    cpu_cores: float | None
    memory_mb: int | None
    gpus_held: float
    gpu_util_pct: float | None
    gpu_memory_mb: int | None
    disk_read_bytes_per_s: float | None
    disk_write_bytes_per_s: float | None


@dataclass(frozen=True)
class NodePoint:
    at: datetime
    cpu_pct: float | None
    load1: float | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    disk_used_pct: float | None
    net_rx_bytes_per_s: float | None
    net_tx_bytes_per_s: float | None
    gpus: list[dict[str, Any]]


@dataclass(frozen=True)
class TaskSeries:
    role: str
    index: int
    points: list[TaskPoint]


@dataclass(frozen=True)
class Window:
    """A window of history as served: its bounds and the seconds one point covers (0: raw)."""

    since: datetime
    until: datetime
    step: int


def resolution(tiers: Sequence[RetentionTier], now: datetime, since: datetime) -> int:
    """The finest tier whose rows still reach back to ``since`` (the coarsest when none does)."""
    for tier in tiers:
        if now - timedelta(seconds=tier.keep_seconds) <= since:
            return tier.step
    return tiers[-1].step


def stitched(rows: Sequence[Any]) -> list[Any]:
    """One series' rows of several steps as one line: the coarsest rows as far as they go,
    then the next finer ones from where those end (the newest buckets are not averaged yet)."""
    line: list[Any] = []
    covered: datetime | None = None
    for step in sorted({r.step for r in rows}, reverse=True):
        taken = [r for r in rows if r.step == step and (covered is None or r.at >= covered)]
        if taken:
            line.extend(taken)
            covered = max(r.at for r in taken) + timedelta(seconds=step)
    return sorted(line, key=lambda r: r.at)


def window_rows(read: Callable[[int, datetime], list[Any]], tiers: Sequence[RetentionTier], window: Window,
                now: datetime) -> tuple[list[Any], int]:
    """The rows a window needs, read ``read(step, since)`` a tier at a time from the coarsest
    that covers it: each finer tier only from where the coarser one's rows end, since
    downsampling is done for all series up to one point in time (``downsample``)."""
    step = resolution(tiers, now, window.since)
    rows: list[Any] = []
    since = window.since
    for tier_step in sorted((t.step for t in tiers if t.step <= step), reverse=True):
        found = read(tier_step, since)
        if found:
            rows.extend(found)
            since = max(since, max(r.at for r in found) + timedelta(seconds=tier_step))
    return rows, step


def capped(points: list[Any], window: Window, step: int, max_points: int, means: Any) -> tuple[list[Any], int]:
    """At most ``max_points`` points: evenly wide buckets over the window, averaged; and the
    seconds a point now covers."""
    if len(points) <= max_points:
        return points, step
    span = (window.until - window.since).total_seconds()
    width = max(step, 1)
    width = int(-(-span // max_points // width) * width) or width  # a whole number of steps
    while span / width > max_points:
        width += max(step, 1)
    buckets: dict[int, list[Any]] = defaultdict(list)
    for point in points:
        buckets[int((point.at - window.since).total_seconds() // width)].append(point)
    kind = type(points[0])
    merged = [kind(at=window.since + timedelta(seconds=n * width), **means(members))
              for n, members in sorted(buckets.items())]
    return merged, width


def task_history(
    session: Session, job_id: int, window: Window, tiers: Sequence[RetentionTier], now: datetime,
    *, role: str | None = None, index: int | None = None, max_points: int = MAX_POINTS,
) -> tuple[list[TaskSeries], int]:
    """A job's (or one task's) figures over ``window``, one series per task, at the finest
    resolution the history keeps for it; and the seconds a point covers (0: raw samples).

    A window with more than ``max_points`` rows of that resolution (a week of 10-minute
    averages) is averaged into wider points by the database (``task_buckets``): reading it
    row by row would cost far more than the 50 ms a query may take."""
    step = resolution(tiers, now, window.since)
    span = (window.until - window.since).total_seconds()
    if step and span / step > max_points:
        width = int(-(-span // (max_points * step)) * step)
        return _task_buckets(session, job_id, window, tiers, step, width, role=role, index=index), width
    rows, step = window_rows(
        lambda tier_step, since: metric_queries.task_rows(session, job_id, tier_step, since, window.until,
                                                          role=role, index=index),
        tiers, window, now)
    by_task: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for row in rows:
        by_task[(row.role, row.index)].append(row)
    series, served = [], step
    for (task_role, task_index), task_rows in sorted(by_task.items()):
        points = [TaskPoint(r.at, *r[4:]) for r in stitched(task_rows)]
        points, width = capped(points, window, step, max_points, task_means)
        served = max(served, width)
        series.append(TaskSeries(task_role, task_index, points))
    return series, served


def _task_buckets(
    session: Session, job_id: int, window: Window, tiers: Sequence[RetentionTier], step: int, width: int,
    *, role: str | None, index: int | None,
) -> list[TaskSeries]:
    """``task_history``'s series in ``width``-second points summed by the database, a tier at a
    time as ``window_rows`` reads them; a point where two tiers meet adds both's sums."""
    sums: dict[tuple[str, int, int], tuple[float, ...]] = {}
    since = window.since
    for tier_step in sorted((t.step for t in tiers if t.step <= step), reverse=True):
        found, newest = metric_queries.task_buckets(session, job_id, tier_step, since, window.until, width,
                                                    role=role, index=index)
        for task_role, task_index, bucket, *figures in found:
            key = (task_role, task_index, bucket)
            known = sums.get(key)
            sums[key] = tuple(figures) if known is None else tuple((a or 0) + (b or 0) for a, b in zip(known, figures))
        if newest is not None:
            since = max(since, newest + timedelta(seconds=tier_step))
    by_task: dict[tuple[str, int], list[TaskPoint]] = defaultdict(list)
    ints = {metric_queries.TASK_FIGURES.index(f) for f in TASK_INTS}
    for (task_role, task_index, bucket), totals in sorted(sums.items()):
        means: list[Any] = [(totals[2 * n] or 0) / totals[2 * n + 1] if totals[2 * n + 1] else None
                            for n in range(len(metric_queries.TASK_FIGURES))]
        means = [rounded(m) if n in ints else m for n, m in enumerate(means)]
        held = metric_queries.TASK_FIGURES.index("gpus_held")
        means[held] = means[held] or 0.0
        by_task[(task_role, task_index)].append(TaskPoint(datetime.fromtimestamp(bucket, UTC), *means))
    return [TaskSeries(r, i, points) for (r, i), points in sorted(by_task.items())]


def node_history(
    session: Session, node: str, window: Window, tiers: Sequence[RetentionTier], now: datetime,
    *, max_points: int = MAX_POINTS,
) -> tuple[list[NodePoint], int]:
    """A node's figures over ``window``, as ``task_history`` does for a job."""
    rows, step = window_rows(
        lambda tier_step, since: metric_queries.node_rows(session, node, tier_step, since, window.until),
        tiers, window, now)
    points = [NodePoint(r.at, *r[2:]) for r in stitched(rows)]
    return capped(points, window, step, max_points, node_means)
