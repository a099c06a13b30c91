"""Rendering ``GET /metrics`` for 1,000 nodes (8 GPUs each) and 10,000 jobs (target < 100 ms).

Setup, straight into a migrated store (SQLite by default; ``--database-url`` for PostgreSQL)
with SQLAlchemy bulk inserts:

* 1,000 nodes of 8 GPUs (8,000 GPUs, one model), 50 users, 4 VCs with quotas;
* 10,000 jobs: 2,000 RUNNING (one attempt, one task of 4 GPUs: every GPU allocated),
  3,000 WAITING, 5,000 SUCCEEDED/FAILED/STOPPED;
* ``--rounds`` rounds of samples (default 360: the hour of raw samples the default
  retention keeps at the default 10 s interval), each one row per node (8 measured GPUs)
  and one per running task, the newest just now, written as the monitoring tick writes a
  round (``store.queries.metrics.add_samples``: the history, and each node's and task's
  newest figures, which the page reads). (A minute's worth once hid that the newest-sample
  queries read every raw row: the page must not grow with the history.)

Then, ``--runs`` times each (default 10), in process:

* the store read (``services.cluster_metrics.cluster_figures``),
* writing the page (``monitor.exposition.render``),
* the whole request, ``GET /metrics`` with the admin's token through the real app
  (FastAPI's TestClient: no socket).

Before timing, the heap is settled as ``yard up`` settles it (``api.server.settle_heap``:
start-up's objects frozen out of the garbage collector's sight).

Each is timed in wall-clock and in this process's CPU seconds: on a shared machine the wall
time includes waiting for a core, the CPU time is what the work itself costs (on SQLite all
of it; on PostgreSQL the server's side is not counted).

Prints p50 and p99 of each (wall and CPU), the page's size and sample count, and the ratio
to the target (the whole request). For comparison it also times ``prometheus_client``'s own
``generate_latest`` on the same families (why ``monitor/exposition.py`` writes the text
itself). Never asserts.

Run:  python benchmarks/bench_metrics_exposition.py [--runs 10] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, percentile, private_schema, ratio_line  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from trainyard.core.clock import FakeClock  # noqa: E402
from trainyard.store.db import Database  # noqa: E402
from trainyard.store.queries.metrics import add_samples  # noqa: E402
from trainyard.store.rows import (  # noqa: E402
    AttemptRow,
    JobRow,
    NodeRow,
    NodeSampleRow,
    TaskRow,
    TaskSampleRow,
    UserRow,
    VcQuotaRow,
    VirtualClusterRow,
)

TARGET_S = 0.100
NODES = 1_000
GPUS_PER_NODE = 8
JOBS = 10_000
RUNNING = 2_000  # 4 GPUs each: all 8,000 GPUs allocated
WAITING = 3_000
USERS = 50
VCS = ("research", "prod", "interns")
MODEL = "NVIDIA A100-SXM4-80GB"
INTERVAL_S = 10.0
SPEC = {"name": "bench", "taskRoles": {"main": {"instances": 1, "resourcePerInstance": {"gpu": 4, "cpu": 4,
                                                                                         "memoryMB": 16384}}}}


def fill(db: Database, now: datetime, rounds: int) -> None:
    with db.session() as s:
        s.execute(insert(UserRow), [
            {"id": 1000 + u, "name": f"user{u:02d}", "is_admin": False, "created_at": now} for u in range(USERS)
        ])
        s.execute(insert(VirtualClusterRow), [
            {"id": i + 1, "name": name, "allow_priority_preemption": True, "created_at": now}
            for i, name in enumerate(VCS)
        ])
        s.execute(insert(VcQuotaRow), [{"vc_id": i + 1, "gpu_model": MODEL, "gpus": 1000} for i in range(len(VCS))])
        s.execute(insert(NodeRow), [
            {"name": f"gpu-{n:04d}", "backend": "local", "address": f"10.0.{n // 256}.{n % 256}",
             "cpu_milli": 128_000, "memory_mb": 1_024_000, "schedulable": True, "cordoned": False, "labels": {},
             "updated_at": now,
             "gpus": [{"index": g, "model": MODEL, "memory_mb": 81920} for g in range(GPUS_PER_NODE)]}
            for n in range(NODES)
        ])
        jobs, attempts, tasks = [], [], []
        for j in range(JOBS):
            job_id = j + 1
            if j < RUNNING:
                state = "RUNNING"
            elif j < RUNNING + WAITING:
                state = "WAITING"
            else:
                state = ("SUCCEEDED", "FAILED", "STOPPED")[j % 3]
            submitted = now - timedelta(seconds=3600 + j)
            started = submitted + timedelta(seconds=30) if state != "WAITING" else None
            jobs.append({
                "id": job_id, "name": f"job-{j}", "user_id": 1000 + j % USERS, "vc": (*VCS, "default")[j % 4],
                "priority": "normal", "state": state, "spec": SPEC, "submitted_at": submitted,
                "started_at": started, "finished_at": None if state in ("RUNNING", "WAITING") else now,
            })
            if state == "WAITING":
                continue
            attempts.append({"id": job_id, "job_id": job_id, "number": 0, "state": state,
                             "started_at": started, "finished_at": None if state == "RUNNING" else now})
            if state == "RUNNING":
                node, half = divmod(j, 2)
                tasks.append({
                    "attempt_id": job_id, "job_id": job_id, "role": "main", "index": 0, "state": "RUNNING",
                    "node": f"gpu-{node:04d}", "gpus": [[half * 4 + g, 1000] for g in range(4)],
                    "cpu_milli": 4000, "memory_mb": 16384, "ports": {}, "started_at": started,
                })
        s.execute(insert(JobRow), jobs)
        s.execute(insert(AttemptRow), attempts)
        s.execute(insert(TaskRow), tasks)
        for r in range(rounds):
            at = now - timedelta(seconds=INTERVAL_S * (rounds - 1 - r))
            nodes = [
                {"node": f"gpu-{n:04d}", "at": at, "step": 0, "cpu_pct": 40.0 + r, "load1": 30.0,
                 "memory_used_mb": 500_000, "memory_total_mb": 1_024_000, "disk_used_pct": 55.5,
                 "gpus": [{"index": g, "model": MODEL, "memory_total_mb": 81920, "util_pct": 50.0 + g + r,
                           "memory_used_mb": 40_000 + g, "temperature_c": 60.0 + g, "power_w": 300.5,
                           "ecc_errors": 0, "simulated": False, "healthy": True} for g in range(GPUS_PER_NODE)]}
                for n in range(NODES)
            ]
            tasks = [
                {"job_id": j + 1, "attempt": 0, "role": "main", "index": 0, "node": f"gpu-{j // 2:04d}", "at": at,
                 "step": 0, "cpu_cores": 3.5, "memory_mb": 12_000, "gpus_held": 4.0, "gpu_util_pct": 75.0 + r,
                 "gpu_memory_mb": 160_000}
                for j in range(RUNNING)
            ]
            if r < rounds - 1:
                s.execute(insert(NodeSampleRow), nodes)
                s.execute(insert(TaskSampleRow), tasks)
            else:  # the newest round as the monitoring tick writes it: history and newest figures
                add_samples(s, [NodeSampleRow(**n) for n in nodes], [TaskSampleRow(**t) for t in tasks])


CPU: dict[str, list[float]] = {}  # process CPU seconds per run, by what was timed


def timed(fn, runs: int, name: str = "") -> tuple[list[float], object]:
    """Wall-clock seconds of each run (and, under ``name`` in ``CPU``, this process's CPU
    seconds: on a shared machine, what the work costs without the wait for a core)."""
    times, result = [], None
    for _ in range(runs):
        began, cpu = time.perf_counter(), time.process_time()
        result = fn()
        times.append(time.perf_counter() - began)
        CPU.setdefault(name, []).append(time.process_time() - cpu)
    return times, result


def cpu_p50_ms(name: str) -> str:
    return f"{median(CPU[name]) * 1000:.1f} ms"


def p50_p99(wall: list[float], name: str) -> str:
    """p50 and p99, wall-clock and CPU, in ms."""
    return (f"p50 {median(wall) * 1000:.1f} ms wall, {cpu_p50_ms(name)} CPU; "
            f"p99 {percentile(wall, 99) * 1000:.1f} ms wall, {percentile(CPU[name], 99) * 1000:.1f} ms CPU")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=360, help="rounds of samples in the store")
    parser.add_argument("--database-url", help="a PostgreSQL URL, SQLAlchemy form (postgresql+psycopg://...): "
                        "the benchmark fills a schema of its own there and drops it (default: a temporary SQLite file)")
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from trainyard.api.app import create_app
    from trainyard.api.server import settle_heap
    from trainyard.backends.local.backend import LocalBackend
    from trainyard.backends.local.gpus import simulated_gpus
    from trainyard.monitor.exposition import render
    from trainyard.services.auth import bootstrap_admin
    from trainyard.services.cluster_metrics import cluster_figures
    from trainyard.web.context import AppContext

    with tempfile.TemporaryDirectory() as tmp, private_schema(args.database_url) as pg_url:
        url = pg_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        db = Database(url)
        db.migrate()
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        with db.session() as s:
            token = bootstrap_admin(s, clock=clock)  # only while there are no users
        began = time.perf_counter()
        fill(db, clock.now(), args.rounds)
        print(f"store: {db.engine.dialect.name}; {NODES} nodes x {GPUS_PER_NODE} GPUs, {JOBS} jobs "
              f"({RUNNING} running, {WAITING} waiting), {args.rounds} rounds of samples; filled in "
              f"{time.perf_counter() - began:.1f} s")
        backend = LocalBackend(Path(tmp) / "local", gpus=simulated_gpus(0), cpu_milli=1000, memory_mb=1024)
        ctx = AppContext(db=db, backend=backend, clock=clock, monitor_interval_seconds=INTERVAL_S)
        http = TestClient(create_app(ctx), headers={"Authorization": f"Bearer {token}"})
        settle_heap()  # as ``yard up`` does once the server is built

        def read() -> object:
            with db.session() as s:
                return cluster_figures(s, clock.now(), INTERVAL_S)

        read_times, figures = timed(read, args.runs, "read")
        write_times, page = timed(lambda: render(figures, None), args.runs, "write")  # type: ignore[arg-type]
        request_times, response = timed(lambda: http.get("/metrics"), args.runs, "request")
        assert response.status_code == 200, response.text  # type: ignore[attr-defined]
        samples = sum(1 for line in str(page).splitlines() if line and not line.startswith("#"))

        # The same samples as the library's own objects (read back from the page, untimed).
        families = list(text_string_to_metric_families(str(page)))

        def by_the_library() -> bytes:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(type("Fixed", (), {"collect": lambda self: families})())
            return generate_latest(registry)

        library_times, _ = timed(by_the_library, max(1, args.runs // 3), "library")
        db.dispose()

    print(f"page: {len(str(page)) / 1e6:.1f} MB, {samples} samples")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall times wait for a core; "
          f"CPU times do not)")
    print(f"store read (cluster_figures): {p50_p99(read_times, 'read')}"
          + (" (PostgreSQL's own work not counted)" if args.database_url else ""))
    print(f"writing the page (render):     {p50_p99(write_times, 'write')}")
    print(f"prometheus_client generate_latest on the same samples, for comparison: "
          f"p50 {median(library_times) * 1000:.1f} ms wall, {cpu_p50_ms('library')} CPU")
    print(f"GET /metrics: {p50_p99(request_times, 'request')}")
    print(ratio_line("GET /metrics p50", median(request_times) * 1000, TARGET_S * 1000, lower_is_better=True,
                     unit="ms"))
    print(f"GET /metrics max: {max(request_times) * 1000:.1f} ms over {args.runs} runs")
    return {"p50_s": median(request_times), "p99_s": percentile(request_times, 99),
            "cpu_p50_s": median(CPU["request"]), "cpu_p99_s": percentile(CPU["request"], 99),
            "read_p50_s": median(read_times), "write_p50_s": median(write_times)}


if __name__ == "__main__":
    main()
