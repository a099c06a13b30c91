"""Filling a store with a month of monitoring history in the database itself.

``bench_metrics.py`` and ``bench_usage.py`` need what the default retention
(``raw:1h,1m:1d,10m:30d``) keeps after 30 days of 1,000 tasks running all along: 6,120 rows
per task (360 raw, 1,440 per-minute, 4,320 per-10-minute), six million in all, and the same
per node with its 8 GPUs in each row. Built in Python and sent row by row, that took longer
than the measurements themselves; here each tier is one ``INSERT ... SELECT`` over generated
series (SQLite: recursive CTEs; PostgreSQL: ``generate_series``), the figures drawn by the
database's ``random()``.

Rows go in oldest first and, within one moment, task by task (or node by node), as the
monitor and the downsampling write them: a job's rows lie spread over the table as they do
in a real store, not side by side, so a query that reads one job pays for that.

Nothing here is measured. Also: ``sample_times``, the (step, at) of every row one series has.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier

GPUS_PER_NODE = 8


def sample_times(
    now: datetime, interval: int, tiers: Sequence[RetentionTier] = DEFAULT_RETENTION_TIERS
) -> Iterator[tuple[int, datetime]]:
    """(step, at) of every row one series holds under ``tiers`` at ``now`` (on every bucket's
    boundary), oldest first within each tier."""
    for tier in tiers:
        every = tier.step or interval
        for n in range(int(tier.keep_seconds // every), 0, -1):
            yield tier.step, now - timedelta(seconds=n * every)


class _Sql:
    """The few expressions that differ between the two databases."""

    def __init__(self, conn: Connection) -> None:
        self.pg = conn.dialect.name == "postgresql"

    def real(self, low: float, high: float) -> str:
        if self.pg:
            return f"({low} + random() * {high - low})"
        return f"({low} + (abs(random()) % 1000000) / 1000000.0 * {high - low})"

    def integer(self, low: int, high: int) -> str:
        if self.pg:
            return f"({low} + floor(random() * {high - low})::integer)"
        return f"({low} + abs(random()) % {high - low})"

    def moment(self, epoch: str) -> str:
        """``epoch`` (seconds) as the column's stored form."""
        if self.pg:
            return f"to_timestamp({epoch})"
        return f"(strftime('%Y-%m-%d %H:%M:%S', {epoch}, 'unixepoch') || '.000000')"  # as SQLAlchemy writes it

    def node_name(self, number: str) -> str:
        if self.pg:
            return f"('node' || lpad(({number})::text, 4, '0'))"
        return f"printf('node%04d', {number})"

    def text(self, expression: str) -> str:
        return f"CAST({expression} AS TEXT)"

    @property
    def format(self) -> str:
        return "format" if self.pg else "printf"

    def json(self, expression: str) -> str:
        return f"CAST({expression} AS json)" if self.pg else expression

    def grid(self, count: int, series: int) -> str:
        """``FROM`` rows (i, k): i in 1..count (the row's age in steps), k in 0..series-1."""
        if self.pg:
            return f"FROM generate_series(1, {count}) AS n(i), generate_series(0, {series - 1}) AS s(k)"
        return (f"FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) "
                f"SELECT i FROM n) AS n, (WITH RECURSIVE s(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM s "
                f"WHERE k < {series - 1}) SELECT k FROM s) AS s")


def _tiers(interval: int, tiers: Sequence[RetentionTier]) -> Iterator[tuple[int, int, int]]:
    """(step, seconds between rows, rows kept) of each tier."""
    for tier in tiers:
        every = tier.step or interval
        yield tier.step, every, int(tier.keep_seconds // every)


def fill_task_history(
    conn: Connection, *, tasks: int, per_job: int, nodes: int, interval: int, now: datetime,
    role: str = "worker", tiers: Sequence[RetentionTier] = DEFAULT_RETENTION_TIERS,
) -> int:
    """Every row ``tiers`` keep of ``tasks`` tasks (task k: job k // per_job + 1, index
    k % per_job, attempt 0, on node k * nodes // tasks) sampled every ``interval`` s; how many."""
    sql = _Sql(conn)
    written = 0
    for step, every, count in _tiers(interval, tiers):
        conn.execute(text(f"""
            INSERT INTO task_samples (job_id, attempt, role, "index", node, at, step, cpu_cores, memory_mb,
                gpus_held, gpu_util_pct, gpu_memory_mb, disk_read_bytes_per_s, disk_write_bytes_per_s)
            SELECT k / {per_job} + 1, 0, :role, k % {per_job}, {sql.node_name(f"k * {nodes} / {tasks}")},
                {sql.moment(f"{int(now.timestamp())} - i * {every}")}, {step}, {sql.real(0.5, 8)},
                {sql.integer(1024, 65536)}, 1.0, {sql.real(0, 100)}, {sql.integer(0, 40960)}, {sql.real(0, 1e8)},
                {sql.real(0, 1e8)}
            {sql.grid(count, tasks)}
            ORDER BY i DESC, k
        """), {"role": role})
        written += count * tasks
    return written


def fill_node_history(
    conn: Connection, *, nodes: int, interval: int, now: datetime,
    tiers: Sequence[RetentionTier] = DEFAULT_RETENTION_TIERS,
) -> int:
    """Every row ``tiers`` keep of ``nodes`` nodes of 8 GPUs (each GPU's figures in the row's
    JSON, as the sampler stores them); how many."""
    sql = _Sql(conn)
    gpu = ('{"index": %s, "model": "A100", "memory_total_mb": 40960, "util_pct": %s, "memory_used_mb": %s, '
           '"temperature_c": %s, "power_w": %s, "ecc_errors": 0, "simulated": false, "healthy": true}')
    figures = [f"{g}, {sql.real(0, 100)}, {sql.integer(0, 40960)}, {sql.real(30, 85)}, {sql.real(50, 400)}"
               for g in range(GPUS_PER_NODE)]
    # One format call per row (PostgreSQL's ``format``, SQLite's ``printf``; both know %s).
    gpus = sql.json(f"{sql.format}('[{', '.join([gpu] * GPUS_PER_NODE)}]', {', '.join(figures)})")
    written = 0
    for step, every, count in _tiers(interval, tiers):
        conn.execute(text(f"""
            INSERT INTO node_samples (node, at, step, cpu_pct, load1, memory_used_mb, memory_total_mb,
                disk_used_pct, net_rx_bytes_per_s, net_tx_bytes_per_s, gpus)
            SELECT {sql.node_name("k")}, {sql.moment(f"{int(now.timestamp())} - i * {every}")}, {step},
                {sql.real(0, 100)}, {sql.real(0, 64)}, {sql.integer(0, 1 << 20)}, {1 << 20}, {sql.real(0, 100)},
                {sql.real(0, 1e9)}, {sql.real(0, 1e9)}, {gpus}
            {sql.grid(count, nodes)}
            ORDER BY i DESC, k
        """))
        written += count * nodes
    return written


@contextlib.contextmanager
def indexes_built_after(conn: Connection, *tables: Any) -> Iterator[None]:
    """Drop the tables' indexes for the ``with`` block and build them again after it: one
    sort per index instead of millions of insertions into it, the same indexes at the end."""
    indexes = [index for table in tables for index in table.__table__.indexes]
    for index in indexes:
        index.drop(conn)
    yield
    for index in indexes:
        index.create(conn)


def analyze(conn: Connection) -> None:
    """Fresh planner statistics, as a store that has been running a month would have."""
    conn.exec_driver_sql("ANALYZE")

