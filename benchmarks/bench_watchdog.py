"""One look of the hang watchdog at 1,000 running tasks (125 jobs of 8 tasks, every job
declaring ``watchdogSeconds``), their logs real files of the local backend (target: < 100 ms,
so that a look every 5 s costs under 2 % of one core, as sampling's target).

In process, no server: a fresh SQLite store (or ``--database-url``), rows inserted in bulk,
a log file per task where the local backend keeps it, then
``controller.watchdog.Watchdog.end_hung_attempts`` timed ``--runs`` times, 5 s apart on a
fake clock; between looks every tenth task's log grows, as a training job's progress lines
do. Nothing is hung (the limit is an hour), as in the controller's steady state. Prints
p50, max and the mean with its ratio to the target, and the share of one core. Never
asserts.

Run:  python benchmarks/bench_watchdog.py [--jobs 125] [--tasks 8] [--runs 20] [--database-url URL]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from trainyard.backends.base import TaskKey
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.watchdog import WATCHDOG_CHECK_SECONDS, Watchdog
from trainyard.core.clock import FakeClock
from trainyard.services.auth import create_user
from trainyard.spec.loading import parse_job
from trainyard.spec.templating import normalized_spec
from trainyard.store.db import Database
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

TARGET_S = 0.1
LIMIT_S = 3600


def fill(db: Database, backend: LocalBackend, clock: FakeClock, jobs: int, tasks: int) -> list[Path]:
    """The running jobs in the store and a log of one line per task; returns the log paths."""
    spec = normalized_spec(parse_job(f"name: b\nwatchdogSeconds: {LIMIT_S}\ntaskRoles:\n  m:\n"
                                     f"    instances: {tasks}\n    commands: ['sleep 1']\n"))
    start = clock.now()
    with db.session() as session:
        user_id = create_user(session, "alice", is_admin=False, clock=clock).id
        session.execute(insert(JobRow), [
            {"id": j, "name": "b", "user_id": user_id, "vc": "default", "priority": "normal", "state": "RUNNING",
             "spec": spec, "submitted_at": start, "started_at": start, "attempt": 0, "version": 1,
             "watchdog_seconds": LIMIT_S}
            for j in range(1, jobs + 1)])
        session.execute(insert(AttemptRow), [
            {"id": j, "job_id": j, "number": 0, "state": "RUNNING", "started_at": start}
            for j in range(1, jobs + 1)])
        session.execute(insert(TaskRow), [
            {"attempt_id": j, "job_id": j, "role": "m", "index": i, "state": "RUNNING", "node": "n0",
             "gpus": [], "cpu_milli": 1000, "memory_mb": 1024, "ports": {}, "started_at": start}
            for j in range(1, jobs + 1) for i in range(tasks)])
    logs = []
    for j in range(1, jobs + 1):
        for i in range(tasks):
            path = backend.log_path(TaskKey(j, 0, "m", i))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("step 0 loss 2.3\n")
            logs.append(path)
    return logs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=125)
    parser.add_argument("--tasks", type=int, default=8, help="tasks per job")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}")
        db.migrate()
        backend = LocalBackend(Path(tmp) / "local", gpus=simulated_gpus(8), cpu_milli=64000, memory_mb=512000)
        clock = FakeClock()
        logs = fill(db, backend, clock, args.jobs, args.tasks)
        watchdog = Watchdog(db, backend, clock)
        times, hung = [], 0
        for run in range(args.runs):
            for path in logs[run % 10::10]:  # a tenth of the tasks printed meanwhile
                with open(path, "a") as log:
                    log.write(f"step {run} loss 1.0\n")
            began = time.perf_counter()
            hung += len(watchdog.end_hung_attempts())
            times.append(time.perf_counter() - began)
            clock.advance(WATCHDOG_CHECK_SECONDS)
        db.dispose()
    p50, mean = statistics.median(times), statistics.fmean(times)
    verdict = "meets" if mean < TARGET_S else "MISSES"
    print(f"watchdog look, {args.jobs * args.tasks} running tasks in {args.jobs} jobs ({db.engine.dialect.name}): "
          f"first {times[0] * 1000:.1f} ms, p50 {p50 * 1000:.1f} ms, max {max(times) * 1000:.1f} ms, "
          f"mean {mean * 1000:.1f} ms; target < {TARGET_S * 1000:.0f} ms: {mean / TARGET_S:.2f}x, {verdict}; "
          f"every {WATCHDOG_CHECK_SECONDS:g} s that is {mean / WATCHDOG_CHECK_SECONDS * 100:.2f} % of one core "
          f"({hung} found hung, as expected 0)")


if __name__ == "__main__":
    main()
