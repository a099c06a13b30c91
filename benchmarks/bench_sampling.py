"""Sampling and storing 1,000 running tasks, as a share of one core at the default monitoring
interval (target < 2 %).

What runs is the real path of one monitoring round on the local backend: ``LocalBackend.sample``
(each task's claim read from its ``pid.json``, one pass over the process table, each task's
process tree measured through psutil, the node through psutil, the GPUs through NVML when the
machine has any) and ``monitor.history.record`` into a migrated store (SQLite by default).

A 2-core machine cannot run 1,000 real tasks, so: ``--processes`` (default 50) real process
groups are started (each a ``sleep`` under ``bash``, i.e. a two-process tree like a task's),
and 1,000 task entries are written into the backend's state directory whose claims point at
them, 20 entries per process group. Every entry is measured in full (its tree walked, each
process read), so the per-task cost is real; what is not real is that the machine's process
table holds 100 task processes rather than 2,000 (that pass costs per process on the
machine, and is printed apart: ``process table``). Simulated GPU slots cost nothing; a GPU
machine adds NVML's per-device calls.

Prints CPU seconds per round (this process's CPU time, over ``--rounds`` rounds after a
warm-up round), wall time, the share of one core at ``--interval`` seconds, and how long
another thread (standing for the controller's loop) can be kept waiting while a round runs
beside it, next to the same figure with no round running. Never asserts.

Run:  python benchmarks/bench_sampling.py [--tasks 1000] [--processes 50] [--rounds 5] [--interval 10]
      [--db-url postgresql://...]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, ratio_line  # noqa: E402

from trainyard.backends.base import TaskKey  # noqa: E402
from trainyard.backends.local import procfs, taskfiles  # noqa: E402
from trainyard.backends.local.backend import LocalBackend  # noqa: E402
from trainyard.backends.local.gpus import simulated_gpus  # noqa: E402
from trainyard.backends.local.metrics import ProcessTable  # noqa: E402
from trainyard.core.settings import DEFAULT_MONITOR_INTERVAL_SECONDS  # noqa: E402
from trainyard.monitor import history  # noqa: E402
from trainyard.store.db import Database  # noqa: E402

TARGET_PCT = 2.0


def _start_groups(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["bash", "-c", "sleep 600; true"], start_new_session=True) for _ in range(count)]


def _write_claims(backend: LocalBackend, groups: list[subprocess.Popen[bytes]], tasks: int) -> dict:
    running = {}
    boot = procfs.boot_id()
    for n in range(tasks):
        key = TaskKey(job_id=n + 1, attempt=0, role="worker", index=0)
        group = groups[n % len(groups)]
        started = procfs.start_time(group.pid)
        task_dir = backend.task_dir(key)
        task_dir.mkdir(parents=True)
        claim = {"boot_id": boot, "supervisor": {"pid": os.getpid(), "start_time": procfs.start_time(os.getpid())},
                 "task": {"pid": group.pid, "pgid": group.pid, "start_time": started}}
        taskfiles.write_json(str(task_dir / taskfiles.PID), claim)
        running[key] = (n % 8,)
    return running


def _private(url: str) -> tuple[str, Callable[[], None] | None]:
    """``url`` itself (SQLite), or a fresh schema of a PostgreSQL ``url`` and how to drop it."""
    if not url.startswith("postgresql"):
        return url, None
    from sqlalchemy import create_engine, text

    schema = f"bench_sampling_{uuid.uuid4().hex[:8]}"
    admin = create_engine("postgresql+psycopg://" + url.split("://", 1)[1])
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}", drop


def _round(backend: LocalBackend, db: Database, running: dict) -> None:
    sampled = backend.sample(datetime.now(UTC), running)
    with db.session() as session:
        history.record(session, sampled)


def _longest_gap(work: Callable[[], None], at_least: float = 0.0) -> float:
    """The longest gap between two wake-ups of this thread, asking for 1 ms sleeps, while
    ``work`` runs in another thread (and for ``at_least`` seconds)."""
    worker = threading.Thread(target=work)
    worker.start()
    began = last = time.perf_counter()
    gap = 0.0
    while worker.is_alive() or time.perf_counter() - began < at_least:
        time.sleep(0.001)
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
    worker.join()
    return gap


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=DEFAULT_MONITOR_INTERVAL_SECONDS)
    parser.add_argument("--db-url", default=None, help="default: a SQLite file in a temporary directory; "
                        "PostgreSQL: the benchmark works in a schema of its own, dropped at the end")
    args = parser.parse_args(argv)

    groups = _start_groups(args.processes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            backend = LocalBackend(Path(tmp) / "state", gpus=simulated_gpus(8))
            running = _write_claims(backend, groups, args.tasks)
            url, drop_schema = _private(args.db_url) if args.db_url else (f"sqlite:///{Path(tmp) / 'db.sqlite'}", None)
            db = Database(url)
            db.migrate()
            time.sleep(0.5)  # let the sleeps exec, so every tree has its two processes
            cpu, wall, stored, sampling = [], [], [], []
            for n in range(args.rounds + 1):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                sampled = backend.sample(datetime.now(UTC), running)
                sampled_cpu = time.process_time() - cpu0
                with db.session() as session:
                    history.record(session, sampled)
                if n:  # the first round warms caches and imports
                    cpu.append(time.process_time() - cpu0)
                    sampling.append(sampled_cpu)
                    wall.append(time.perf_counter() - wall0)
                    stored.append(len(sampled.tasks))
            # What a round costs the controller's own thread: the longest gap, while a round
            # runs in its background thread (as Monitoring runs it), between two wake-ups
            # of a thread asking for 1 ms sleeps (the GIL and SQLite's write lock are shared).
            stalls, idle = [], []
            for _ in range(3):
                idle.append(_longest_gap(lambda: None, 1.0))
                stalls.append(_longest_gap(lambda: _round(backend, db, running)))
            table0 = time.process_time()
            table = ProcessTable()
            table_cpu = time.process_time() - table0
            db.dispose()
            if drop_schema is not None:
                drop_schema()
    finally:
        for group in groups:
            os.killpg(group.pid, signal.SIGKILL)
            group.wait()

    per_round = median(cpu)
    share = 100.0 * per_round / args.interval
    print(f"tasks sampled per round: {min(stored)} of {args.tasks} ({args.processes} real process groups)")
    print(f"process table: {len(table.stats)} processes on this machine, one pass {table_cpu * 1000:.1f} ms CPU "
          f"({table_cpu / max(1, len(table.stats)) * 1e6:.0f} µs per process)")
    print(f"one round (sample + store), median of {args.rounds}: {per_round * 1000:.1f} ms CPU, "
          f"{median(wall) * 1000:.1f} ms wall; {per_round / args.tasks * 1e6:.0f} µs CPU per task "
          f"(sampling {median(sampling) * 1000:.1f} ms, storing {(per_round - median(sampling)) * 1000:.1f} ms)")
    print(f"longest stall of another thread while a round runs beside it: {median(stalls) * 1000:.1f} ms "
          f"(median of 3 rounds; {median(idle) * 1000:.1f} ms in 1 s with no round: this machine's own noise)")
    print(ratio_line(f"share of one core at a {args.interval:g} s interval", share, TARGET_PCT,
                     lower_is_better=True, unit="%"))


if __name__ == "__main__":
    main()
