"""Usage accounting (``GET /usage``'s service) over a month of monitoring history.

Setup: a fresh, migrated SQLite store (or ``--database-url``); ``--tasks`` running tasks
(default 1,000: 4 per job, 2 GPUs each, jobs spread over 10 users) that started 30 days ago,
each with the history the default retention (``raw:1h,1m:1d,10m:30d``) keeps after a month:
raw rows every 10 s for the last hour, per-minute rows for the last day, per-10-minute rows
for all 30 days — 6,120 rows per task, the tiers overlapping as downsampling leaves them.
The database makes the rows itself (``history_fill.py``).

Then the history keeper's daily totals (``services/usage_days.py``) are made as the keeper
makes them 5 minutes after midnight: the 30 days at once (what the first run after the
upgrade does), timed, and the newest day again alone (what it does each night), timed.

Then, ``--runs`` times each, in process (no HTTP), at 00:05 (the day before is closed):

* a 30-day report by user over every job (``yard usage --since 30d`` as an admin),
* a 7-day report by job over every job,
* one job's 30-day report (what ``yard job ID`` asks for an ended job's efficiency line),
* a 30-day report by user from 06:00 to 18:00: its partial edge days summed from rows (the
  cost of a report up to "now" late in the day, with a day's per-minute rows to read),
* the same 30 days from rows alone (no closed day: what a report cost before), once,
* the task runs alone (the allocated hours' query) for 30 days.

Prints p50 and max and the monitoring rows summed per second. Never asserts; there is no target in the
issue for these, so the numbers are there to watch for regressions and to size a site.

Run:  python benchmarks/bench_usage.py [--tasks 1000] [--runs 3] [--database-url URL]

``--database-url``: a PostgreSQL URL (SQLAlchemy form); the benchmark fills a schema of its own
there and drops it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import private_schema  # noqa: E402
from history_fill import analyze, fill_task_history, indexes_built_after  # noqa: E402
from sqlalchemy import delete, insert, select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from trainyard.core.clock import FakeClock  # noqa: E402
from trainyard.services import auth, usage_days  # noqa: E402
from trainyard.services import usage as usage_service  # noqa: E402
from trainyard.store.db import Database  # noqa: E402
from trainyard.store.queries import usage as usage_queries  # noqa: E402
from trainyard.store.rows import (  # noqa: E402
    AttemptRow,
    JobRow,
    TaskRow,
    TaskSampleRow,
    TaskUsageDayRow,
    UsageDayRow,
    UserRow,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
DAYS = 30
TASKS_PER_JOB = 4
USERS = 10
INTERVAL = 10  # seconds between raw samples
CLOSED_AT = NOW + timedelta(minutes=5)  # when the keeper closes the day that ended at NOW


def populate(db: Database, tasks: int) -> int:
    clock = FakeClock(NOW - timedelta(days=DAYS + 1))
    with db.session() as s:
        users = [auth.create_user(s, f"user{i}", is_admin=i == 0, clock=clock) for i in range(USERS)]
        user_ids = [u.id for u in users]
    started = NOW - timedelta(days=DAYS)
    jobs = (tasks + TASKS_PER_JOB - 1) // TASKS_PER_JOB
    with db.session() as s:
        s.execute(insert(JobRow), [
            {"id": j + 1, "name": f"job{j}", "user_id": user_ids[j % USERS], "vc": "default", "priority": "normal",
             "state": "RUNNING", "spec": {}, "submitted_at": started, "started_at": started, "attempt": 0}
            for j in range(jobs)
        ])
        s.execute(insert(AttemptRow), [
            {"id": j + 1, "job_id": j + 1, "number": 0, "state": "RUNNING", "started_at": started}
            for j in range(jobs)
        ])
        s.execute(insert(TaskRow), [
            {"attempt_id": t // TASKS_PER_JOB + 1, "job_id": t // TASKS_PER_JOB + 1, "role": "w",
             "index": t % TASKS_PER_JOB, "state": "RUNNING", "node": f"n{t}", "gpus": [[0, 1000], [1, 1000]],
             "cpu_milli": 8000, "memory_mb": 65536, "ports": {}, "started_at": started}
            for t in range(tasks)
        ])
    with db.engine.begin() as conn, indexes_built_after(conn, TaskSampleRow):
        written = fill_task_history(conn, tasks=tasks, per_job=TASKS_PER_JOB, nodes=tasks, interval=INTERVAL,
                                    now=NOW, role="w")
    with db.engine.begin() as conn:
        analyze(conn)
    return written


def cpu_seconds(s: Session) -> float:
    """This process's CPU seconds, and on PostgreSQL (a local server) its backend's for this
    session too, read from /proc: the server does most of a report's work there."""
    used = time.process_time()
    if s.get_bind().dialect.name == "postgresql":
        pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            used += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return used


def timed(db: Database, runs: int, **kwargs: object) -> tuple[list[float], list[float], int]:
    """Wall and CPU seconds (this process's and, on PostgreSQL, its server backend's) of each
    run, and the report's line count."""
    times, cpus, lines = [], [], 0
    for _ in range(runs):
        with db.session() as s:
            admin = s.scalars(select(UserRow).where(UserRow.name == "user0")).one()
            start, cpu = time.perf_counter(), cpu_seconds(s)
            report = usage_service.usage_report(s, admin, monitor_interval_seconds=INTERVAL, **kwargs)  # type: ignore[arg-type]
            times.append(time.perf_counter() - start)
            cpus.append(cpu_seconds(s) - cpu)
            lines = len(report.lines)
    return times, cpus, lines


def report(db: Database, runs: int, title: str, read: int | None, **kwargs: object) -> None:
    times, cpus, lines = timed(db, runs, **kwargs)
    p50 = statistics.median(times)
    rate = f", {read / p50:,.0f} rows/s" if read else ""
    print(f"{title:32s} p50 {p50 * 1000:8.1f} ms  max {max(times) * 1000:8.1f} ms  "
          f"CPU p50 {statistics.median(cpus) * 1000:8.1f} ms  ({lines} lines{rate})")


def close_all(db: Database) -> None:
    """Close the 30 days as the keeper's first run after the upgrade does, then the newest
    again alone, as each night; print how long each took (CPU as ``cpu_seconds``)."""
    with db.session() as s:
        days = usage_days.days_to_close(s, CLOSED_AT, INTERVAL, [0, 60, 600])
    start, cpu = time.perf_counter(), 0.0
    for day in days:
        with db.session() as s:
            before = cpu_seconds(s)
            usage_days.close_day(s, day, CLOSED_AT, INTERVAL)
            cpu += cpu_seconds(s) - before
    print(f"{'closing ' + str(len(days)) + ' days at once':32s} {time.perf_counter() - start:8.1f} s "
          f"CPU {cpu:8.1f} s")
    with db.session() as s:
        s.execute(delete(TaskUsageDayRow).where(TaskUsageDayRow.day == days[-1]))
        s.execute(delete(UsageDayRow).where(UsageDayRow.day == days[-1]))
    with db.session() as s:
        start, before = time.perf_counter(), cpu_seconds(s)
        usage_days.close_day(s, days[-1], CLOSED_AT, INTERVAL)
        print(f"{'closing the newest day (nightly)':32s} {time.perf_counter() - start:8.1f} s "
              f"CPU {cpu_seconds(s) - before:8.1f} s")


def reopen_all(db: Database) -> None:
    with db.session() as s:
        s.execute(delete(TaskUsageDayRow))
        s.execute(delete(UsageDayRow))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home, private_schema(args.database_url) as pg_url:
        db = Database(pg_url or f"sqlite:///{home}/trainyard.db")
        db.migrate()
        start = time.perf_counter()
        rows = populate(db, args.tasks)
        print(f"setup: {args.tasks} running tasks, {rows:,} monitoring rows in {time.perf_counter() - start:.1f} s "
              f"({db.engine.dialect.name})")
        close_all(db)
        cases = [
            ("30 days, by user, every job", "user", NOW - timedelta(days=DAYS), NOW, None, rows),
            ("7 days, by job, every job", "job", NOW - timedelta(days=7), NOW, None, None),
            ("30 days, one job", "job", NOW - timedelta(days=DAYS), NOW, 1, rows * TASKS_PER_JOB // max(args.tasks, 1)),
            ("30 days 06:00-18:00, by user", "user", NOW - timedelta(days=DAYS, hours=-6), NOW - timedelta(hours=6),
             None, None),
        ]
        for title, by, since, until, job, read in cases:
            report(db, args.runs, title, read, by=by, period=usage_service.period_of(since, until, CLOSED_AT),
                   job_id=job)
        reopen_all(db)
        report(db, 1, "30 days, by user, rows alone", rows, by="user",  # once: it takes minutes at full size
               period=usage_service.period_of(NOW - timedelta(days=DAYS), NOW, CLOSED_AT))
        times, cpus = [], []
        for _ in range(args.runs):
            with db.session() as s:
                start, cpu = time.perf_counter(), cpu_seconds(s)
                usage_queries.task_runs(s, NOW - timedelta(days=DAYS), NOW)
                times.append(time.perf_counter() - start)
                cpus.append(cpu_seconds(s) - cpu)
        print(f"{'task runs alone, 30 days':32s} p50 {statistics.median(times) * 1000:8.1f} ms  "
              f"CPU p50 {statistics.median(cpus) * 1000:8.1f} ms")
        db.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
