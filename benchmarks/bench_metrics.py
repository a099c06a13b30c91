"""The monitoring history at its full size: a 7-day query for one job, the store's size, and
the cost of keeping it downsampled.

Fills a fresh store (a SQLite file, and PostgreSQL too when ``TRAINYARD_TEST_DATABASE_URL``
is set: a private schema, dropped at the end), migrated as ``yard up`` migrates it, with what
the default retention (``raw:1h,1m:1d,10m:30d``) keeps after 30 days of ``--tasks`` tasks
running all along (``--tasks-per-job`` a job) on ``--nodes`` nodes of 8 GPUs, sampled every
``--interval`` seconds: per task 1 hour of raw samples, 1 day of per-minute averages and 30
days of per-10-minute averages; the same per node, its 8 GPUs in each row. The rows are made
by the database itself (``history_fill.py``: a few ``INSERT ... SELECT``, indexes built
after), not through the sampler (its own benchmark is the sampling part's): the full size,
about 6.9 million rows, fills in a minute or two.

Then it times, each as the API does it (``monitor.history.task_history`` and the response
model), a 7-day query of one job (target < 50 ms; p50, p99 and max, wall and CPU), a 1-day
and a 1-hour one, a 7-day query of one node; prints the store's size (total, per task and
node per day); and times one
``maintain`` in the steady state: a minute of new raw samples for every task and node
averaged, and what has aged out pruned (as % of one core at one run a minute).

Prints numbers and ratios; asserts nothing.

Run:  python benchmarks/bench_metrics.py [--tasks 1000] [--tasks-per-job 8] [--nodes 125]
      [--runs 20] [--only sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, percentile, ratio_line  # noqa: E402
from history_fill import (  # noqa: E402
    GPUS_PER_NODE,
    analyze,
    fill_node_history,
    fill_task_history,
    indexes_built_after,
)

from trainyard.core.retention import DEFAULT_RETENTION_TIERS  # noqa: E402
from trainyard.monitor.history import SETTLE, Window, maintain, node_history  # noqa: E402
from trainyard.schemas.history import JobMetrics  # noqa: E402
from trainyard.services.history import node_point_view, read_job_metrics  # noqa: E402
from trainyard.store.db import Database  # noqa: E402
from trainyard.store.rows import NodeSampleRow, TaskSampleRow  # noqa: E402

NOW = datetime(2026, 3, 1, tzinfo=UTC)  # on every bucket's boundary
BATCH = 20_000
QUERY_TARGET_MS = 50.0


def gpus(rng: random.Random) -> list[dict[str, Any]]:
    return [{"index": i, "model": "A100", "memory_total_mb": 40960, "util_pct": rng.uniform(0, 100),
             "memory_used_mb": rng.randrange(0, 40960), "temperature_c": rng.uniform(30, 85),
             "power_w": rng.uniform(50, 400), "ecc_errors": 0, "simulated": False, "healthy": True}
            for i in range(GPUS_PER_NODE)]


def bulk_insert(db: Database, table: Any, rows: Iterator[dict[str, Any]]) -> int:
    total = 0
    batch: list[dict[str, Any]] = []
    with db.engine.begin() as conn:
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                conn.execute(insert(table), batch)
                total += len(batch)
                batch = []
        if batch:
            conn.execute(insert(table), batch)
            total += len(batch)
    return total


def store_bytes(db: Database) -> int:
    with db.engine.connect() as conn:
        if db.engine.dialect.name == "sqlite":
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar() or 0
            size = conn.exec_driver_sql("PRAGMA page_size").scalar() or 0
            return int(pages) * int(size)
        return int(conn.execute(text(
            "SELECT pg_total_relation_size('task_samples') + pg_total_relation_size('node_samples')")).scalar() or 0)


def history_bytes_sqlite(db: Database) -> int | None:
    """The two tables and their indexes alone, where SQLite can say (dbstat)."""
    try:
        with db.engine.connect() as conn:
            return int(conn.exec_driver_sql(
                "SELECT sum(pgsize) FROM dbstat WHERE name LIKE '%samples%'").scalar() or 0)
    except Exception:  # noqa: BLE001 - dbstat is a compile-time option
        return None


def timed_ms(fn: Any, runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (this process's) milliseconds of each run: on a busy machine the wall time
    also counts waiting for a core, the CPU time does not (nor PostgreSQL's own work)."""
    walls, cpus = [], []
    for _ in range(runs):
        started, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return walls, cpus


def job_query(db: Database, job_id: int, span: timedelta) -> JobMetrics:
    with db.session() as session:
        return read_job_metrics(session, job_id, Window(NOW - span, NOW, 0), retention=DEFAULT_RETENTION_TIERS,
                                now=NOW)


def node_query(db: Database, node: str, span: timedelta) -> int:
    window = Window(NOW - span, NOW, 0)
    with db.session() as session:
        points, _ = node_history(session, node, window, DEFAULT_RETENTION_TIERS, NOW)
        return len([node_point_view(p) for p in points])


def steady_state_maintain(db: Database, args: argparse.Namespace) -> tuple[float, float, int]:
    """One minute more of raw samples for every task and node, then one ``maintain``: its wall
    and CPU ms, and the per-minute rows it wrote."""
    rng = random.Random(9)
    minute = [NOW + timedelta(seconds=s) for s in range(0, 60, args.interval)]
    tasks = ({"job_id": t // args.tasks_per_job + 1, "attempt": 0, "role": "worker", "index": t % args.tasks_per_job,
              "node": "node0000", "at": at, "step": 0, "cpu_cores": rng.uniform(0, 8), "memory_mb": 4096,
              "gpus_held": 1.0, "gpu_util_pct": rng.uniform(0, 100), "gpu_memory_mb": 1000}
             for t in range(args.tasks) for at in minute)
    bulk_insert(db, TaskSampleRow, tasks)
    bulk_insert(db, NodeSampleRow, ({"node": f"node{n:04d}", "at": at, "step": 0, "cpu_pct": 50.0, "gpus": gpus(rng)}
                                    for n in range(args.nodes) for at in minute))
    started, cpu = time.perf_counter(), time.process_time()
    with db.session() as session:
        done = maintain(session, NOW + timedelta(minutes=1) + SETTLE, DEFAULT_RETENTION_TIERS)
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000, done.written.get(60, 0)


def run(url: str, label: str, args: argparse.Namespace) -> None:
    print(f"\n== {label} ==")
    db = Database(url)
    db.migrate()
    started = time.perf_counter()
    with db.engine.begin() as conn, indexes_built_after(conn, TaskSampleRow, NodeSampleRow):
        task_count = fill_task_history(conn, tasks=args.tasks, per_job=args.tasks_per_job, nodes=args.nodes,
                                       interval=args.interval, now=NOW)
        node_count = fill_node_history(conn, nodes=args.nodes, interval=args.interval, now=NOW)
    with db.engine.begin() as conn:
        analyze(conn)
    print(f"filled {task_count:,} task rows and {node_count:,} node rows in {time.perf_counter() - started:.0f} s "
          f"({args.tasks} tasks, {args.nodes} nodes × {GPUS_PER_NODE} GPUs, 30 days at the default retention)")
    per_series = task_count // args.tasks
    print(f"rows per task (or node) kept: {per_series:,} (raw 1 h every {args.interval} s, minutes for 1 day, "
          "10 minutes for 30 days)")

    size = store_bytes(db)
    history = history_bytes_sqlite(db) if db.engine.dialect.name == "sqlite" else size
    shown = history if history is not None else size
    days = 30
    print(f"store size: {size / 2**20:,.0f} MiB"
          + (f" (history tables and indexes: {history / 2**20:,.0f} MiB)" if history is not None else ""))
    task_share = task_count / (task_count + node_count * 3)  # a node row (8 GPUs in JSON) is ~3 task rows
    print(f"  ≈ {shown / (task_count + node_count):,.0f} B a row; for 30 days of history: "
          f"{shown * task_share / args.tasks / 2**20:,.2f} MiB a task, "
          f"{shown * (1 - task_share) / args.nodes / 2**20:,.2f} MiB a node (8 GPUs); "
          f"≈ {shown / (args.tasks + args.nodes) / days / 2**10:,.0f} KiB a series per day kept")

    jobs = max(1, args.tasks // args.tasks_per_job)
    picks = [random.Random(11).randrange(1, jobs + 1) for _ in range(args.runs)]
    for span, name in ((timedelta(days=7), "7-day"), (timedelta(days=1), "1-day"), (timedelta(hours=1), "1-hour")):
        job_query(db, picks[0], span)  # warm the connection pool and caches once
        it = iter(picks)
        times, cpu = timed_ms(lambda: job_query(db, next(it), span), args.runs)  # noqa: B023
        metrics = job_query(db, picks[0], span)
        points = sum(len(t.points) for t in metrics.tasks)
        line = f"{name} query, one job of {args.tasks_per_job} tasks ({points} points, step {metrics.step} s)"
        if name == "7-day":
            print(ratio_line(f"{line}, p50", median(times), QUERY_TARGET_MS, lower_is_better=True, unit="ms"))
            print(f"  wall p99 {percentile(times, 99):.1f} ms, max {max(times):.1f} ms over {args.runs} runs; "
                  f"CPU p50 {median(cpu):.1f} ms, p99 {percentile(cpu, 99):.1f} ms "
                  f"(load average {os.getloadavg()[0]:.1f})")
        else:
            print(f"{line}: p50 {median(times):.1f} ms, p95 {percentile(times, 95):.1f} ms, "
                  f"CPU p50 {median(cpu):.1f} ms")
    times, cpu = timed_ms(lambda: node_query(db, "node0001", timedelta(days=7)), args.runs)
    print(f"7-day query, one node: p50 {median(times):.1f} ms, CPU p50 {median(cpu):.1f} ms")

    took_ms, cpu_ms, written = steady_state_maintain(db, args)
    print(f"steady-state maintain (a minute of raw samples for {args.tasks} tasks and {args.nodes} nodes averaged "
          f"into {written} rows, then pruning): {took_ms:.0f} ms wall, {cpu_ms:.0f} ms CPU: "
          f"{cpu_ms / 600:.2f} % of one core at once a minute")
    db.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--tasks-per-job", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--interval", type=int, default=10, help="seconds between raw samples")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args(argv)
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
            run(f"sqlite:///{Path(tmp) / 'trainyard.db'}", "SQLite (a file)", args)
    pg = os.environ.get("TRAINYARD_TEST_DATABASE_URL")
    if args.only != "sqlite":
        if not pg:
            print("\nPostgreSQL: skipped (set TRAINYARD_TEST_DATABASE_URL)")
            return 0
        base = "postgresql+psycopg://" + pg.split("://", 1)[1] if pg.startswith("postgresql://") else pg
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        admin = create_engine(base)
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        try:
            sep = "&" if "?" in pg else "?"
            run(f"{pg}{sep}options=-csearch_path%3D{schema}", "PostgreSQL", args)
        finally:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
