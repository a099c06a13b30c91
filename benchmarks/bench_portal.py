"""The portal's pages with 100,000 jobs in the store: server time of the home page and of one
page of the job list (targets: p50 < 100 ms, p99 < 300 ms), the bytes of each page (none over
200 KB), and a task's 100 MB log streamed whole by the job page's "Whole log" route (the
server's memory grows by about one page of it, not by the log).

In process: the real app (``create_app``) on a real store, requests through Starlette's
TestClient (what is timed is the request as the app serves it, the client's own few hundred
microseconds included). The store is filled as ``bench_list_jobs.py`` fills it (bulk
inserts: 90 % admin's jobs, 10 % alice's; 1 % waiting), plus a week of monitoring samples of
the running job (the home page's usage card reads them). The home page loads that card
separately (``/home/usage``): its time is printed on its own line, outside the targets, as it
is accounting over every task its user ran that week.

Run:  python benchmarks/bench_portal.py [--jobs 100000] [--requests 200] [--log-mb 100]
      [--database-url postgresql+psycopg://...]   (a schema of its own there, dropped after;
      default: a temporary SQLite file)
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_list_jobs import fill_store  # noqa: E402
from bench_metrics_exposition import private_schema  # noqa: E402
from common import ratio_line  # noqa: E402

TARGET_P50_S = 0.100
TARGET_P99_S = 0.300
TARGET_PAGE_BYTES = 200 * 1024
PASSWORD = "a bench password"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def build(db_url: str, home: Path, n_jobs: int):  # noqa: ANN201 - (app, ctx, running job's task key)
    from fastapi.testclient import TestClient  # noqa: F401 - fail early without it

    from trainyard.api.app import create_app
    from trainyard.backends.base import TaskKey
    from trainyard.backends.local.backend import LocalBackend
    from trainyard.backends.local.gpus import simulated_gpus
    from trainyard.controller.inventory import sync_inventory
    from trainyard.core.clock import SystemClock
    from trainyard.core.states import JobState
    from trainyard.services.auth import bootstrap_admin, create_user, get_user
    from trainyard.services.passwords import set_password
    from trainyard.store.db import Database
    from trainyard.store.rows import JobRow, TaskSampleRow
    from trainyard.web.context import AppContext

    clock = SystemClock()
    db = Database(db_url)
    db.migrate()
    backend = LocalBackend(home / "state", gpus=simulated_gpus(8), cpu_milli=32000, memory_mb=65536)
    with db.session() as session:
        sync_inventory(session, backend.name, backend.inventory(), clock)
        bootstrap_admin(session, clock=clock)
        create_user(session, "alice", is_admin=False, clock=clock)
    t0 = time.perf_counter()
    counts = fill_store(db_url, n_jobs)
    print(f"  filled the store in {time.perf_counter() - t0:.1f} s: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))
    now = clock.now()
    with db.session() as session:
        admin = get_user(session, "admin")
        for name in ("admin", "alice"):
            set_password(session, admin, name, PASSWORD)
        # One job of alice's running for a week, with its monitoring samples (her week's
        # usage) and its task's log.
        job = session.get(JobRow, n_jobs)
        assert job is not None
        job.state, job.started_at, job.finished_at = JobState.RUNNING, now - timedelta(days=7), None
        job.user_id = get_user(session, "alice").id
        job_id = job.id
    t0 = time.perf_counter()
    ran = add_attempts_and_tasks(db, node=backend.inventory()[0].name)
    print(f"  gave the {ran:,} jobs that ran an attempt and a task in {time.perf_counter() - t0:.1f} s")
    with db.session() as session:
        # As the history keeps them by default (raw:1h,1m:1d,10m:30d): raw 10-second samples
        # for the last hour, 1-minute rows for the last day, 10-minute rows before.
        tiers = [(0, 10, timedelta(hours=1)), (60, 60, timedelta(days=1)), (600, 600, timedelta(days=7))]
        samples, reach = [], timedelta(0)
        for step, every, until in tiers:
            moment = now - reach
            while moment > now - until:
                samples.append({"job_id": job_id, "attempt": 0, "role": "train", "index": 0, "node": "n",
                                "step": step, "at": moment, "cpu_cores": 1.0, "memory_mb": 2048,
                                "gpus_held": 1.0, "gpu_util_pct": 50.0})
                moment -= timedelta(seconds=every)
            reach = until
        session.bulk_insert_mappings(TaskSampleRow, samples)  # type: ignore[arg-type]
        key = TaskKey(job_id, 0, "train", 0)
    ctx = AppContext(db=db, backend=backend, clock=clock)
    return create_app(ctx), ctx, key


def add_attempts_and_tasks(db, *, node: str, batch: int = 10_000) -> int:  # noqa: ANN001
    """Attempt 0 and one task for every job that started, as the controller leaves them: what
    the usage the home page shows is summed from."""
    from sqlalchemy import insert, select

    from trainyard.store.rows import AttemptRow, JobRow, TaskRow

    with db.session() as session:
        ran = list(session.execute(select(JobRow.id, JobRow.state, JobRow.started_at, JobRow.finished_at)
                                   .where(JobRow.started_at.is_not(None))))
    for i in range(0, len(ran), batch):
        part = ran[i:i + batch]
        with db.session() as session:
            session.execute(insert(AttemptRow), [
                {"id": job_id, "job_id": job_id, "number": 0, "state": state, "started_at": started,
                 "finished_at": finished, "reason": ""} for job_id, state, started, finished in part])
            session.execute(insert(TaskRow), [
                {"attempt_id": job_id, "job_id": job_id, "role": "train", "index": 0, "state": state, "node": node,
                 "gpus": [[0, 1000]], "cpu_milli": 2000, "memory_mb": 4096, "ports": {}, "run": 0,
                 "started_at": started, "finished_at": finished, "message": "", "stop_sent": False}
                for job_id, state, started, finished in part])
    return len(ran)


def signed_in(app, name: str):  # noqa: ANN001, ANN201
    from fastapi.testclient import TestClient

    client = TestClient(app, base_url="http://testserver", follow_redirects=False,
                        headers={"Origin": "http://testserver"})
    answer = client.post("/signin", data={"username": name, "password": PASSWORD})
    assert answer.status_code == 303, answer.text
    return client


def time_page(client, url: str, requests: int) -> tuple[list[float], list[float], int]:  # noqa: ANN001
    """Wall and CPU seconds of each request (CPU: this process's, which runs the app and, on
    SQLite, the database: on a shared machine the wall time also holds the wait for a core)."""
    size = len(client.get(url).content)  # warm (template compiled, caches filled)
    wall, cpu = [], []
    for _ in range(requests):
        t0, c0 = time.perf_counter(), time.process_time()
        answer = client.get(url)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        assert answer.status_code == 200, (url, answer.status_code, answer.text[:300])
    return wall, cpu, size


def write_log(path: Path, megabytes: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = b"step 000000 loss 0.123456 lr 0.000100 throughput 1234.5 samples/s " + b"x" * 40 + b"\n"
    block = line * ((1 << 20) // len(line) + 1)
    with path.open("wb") as out:
        for _ in range(megabytes):
            out.write(block[: 1 << 20])
    return path.stat().st_size


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--log-mb", type=int, default=100)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="yard-bench-portal-"))
    with private_schema(args.database_url) as pg_url:
        return run(args, home, pg_url or f"sqlite:///{home / 'trainyard.db'}")


def run(args: argparse.Namespace, home: Path, db_url: str) -> dict[str, float]:
    print(f"== the portal with {args.jobs:,} jobs in {db_url.split(':')[0]}; {args.requests} requests a page ==")
    results: dict[str, float] = {}
    try:
        app, ctx, key = build(db_url, home, args.jobs)
        admin, alice = signed_in(app, "admin"), signed_in(app, "alice")
        from trainyard.api.server import settle_heap

        settle_heap()  # as `yard up` does once its app is built: start-up's objects out of the GC's walks
        cursor = None
        for _ in range(19):  # the cursor of page 20
            found = re.search(r'href="/jobs\?before=(\d+)" rel="next"', admin.get(
                "/jobs" + (f"?before={cursor}" if cursor else "")).text)
            cursor = int(found.group(1)) if found else None
        cases = [
            ("home (admin)", admin, "/"),
            ("home (alice)", alice, "/"),
            ("jobs (admin)", admin, "/jobs"),
            ("jobs (alice)", alice, "/jobs"),
            ("jobs page 20 (admin)", admin, f"/jobs?before={cursor}"),
            ("jobs oldest first (admin)", admin, "/jobs?order=oldest"),
            ("jobs state=WAITING (admin)", admin, "/jobs?state=WAITING"),
            ("jobs user=alice (admin)", admin, "/jobs?user=alice"),
            ("jobs name~bench-9 (admin)", admin, "/jobs?name=bench-9"),
            ("jobs name~nothing (admin: scans all)", admin, "/jobs?name=no-such-job"),
            ("home's week-usage card (alice) [*]", alice, "/home/usage"),
            ("home's week-usage card (admin) [*]", admin, "/home/usage"),
            ("job page (alice)", alice, f"/jobs/{key.job_id}"),
            ("job state fragment (alice)", alice, f"/jobs/{key.job_id}/state"),
        ]
        worst: dict[str, float] = {"wall p50": 0.0, "wall p99": 0.0, "cpu p50": 0.0, "cpu p99": 0.0}
        biggest = 0
        print(f"  {'page':<38} {'wall p50':>9} {'p99':>8} {'CPU p50':>9} {'p99':>8} {'size':>9}")
        for label, client, url in cases:
            # [*]: seconds a request; a tenth of the requests
            wall, cpu, size = time_page(client, url, args.requests // 10 if "[*]" in label else args.requests)
            figures = {"wall p50": statistics.median(wall), "wall p99": percentile(wall, 0.99),
                       "cpu p50": statistics.median(cpu), "cpu p99": percentile(cpu, 0.99)}
            results.update({f"{label} {k}": v for k, v in figures.items()})
            if label.startswith(("home (", "jobs (")):  # the targets: home, one page of the list
                worst = {k: max(v, figures[k]) for k, v in worst.items()}
            biggest = max(biggest, size)
            print(f"  {label:<38} " + " ".join(f"{figures[k] * 1000:8.1f}ms" for k in figures)
                  + f" {size / 1024:7.1f}KB")
        load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
        print(f"  (load average {load} while measured)")
        for kind in ("wall", "cpu"):
            print("  " + ratio_line(f"home and job list, worst {kind} p50", worst[f"{kind} p50"], TARGET_P50_S,
                                    lower_is_better=True, unit="s"))
            print("  " + ratio_line(f"home and job list, worst {kind} p99", worst[f"{kind} p99"], TARGET_P99_S,
                                    lower_is_better=True, unit="s"))
        results.update({f"worst {k}": v for k, v in worst.items()})
        results["largest_page_bytes"] = biggest
        print("  " + ratio_line("largest page", biggest / 1024, TARGET_PAGE_BYTES / 1024, lower_is_better=True,
                                unit="KB"))

        size = write_log(ctx.backend.log_path(key), args.log_mb)  # type: ignore[attr-defined]
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tracemalloc.start()
        t0 = time.perf_counter()
        received = 0
        with alice.stream("GET", f"/jobs/{key.job_id}/log/whole") as answer:
            for chunk in answer.iter_bytes():
                received += len(chunk)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024
        assert received == size, (received, size)
        print(f"  whole log: {size / 2**20:.0f} MiB streamed in {elapsed:.2f} s ({size / 2**20 / elapsed:.0f} MiB/s); "
              f"peak Python allocations {peak / 2**20:.1f} MiB ({peak / size * 100:.1f} % of the log); "
              f"peak RSS growth {rss_growth / 2**20:.1f} MiB")
        t0 = time.perf_counter()
        first = alice.get(f"/jobs/{key.job_id}/log", params={"tail": 2000})
        print(f"  the job page's first log read (last 2000 lines of {size / 2**20:.0f} MiB): "
              f"{(time.perf_counter() - t0) * 1000:.1f} ms, {len(first.content) / 1024:.0f} KB")
        results["log_peak_alloc_bytes"], results["log_rss_growth_bytes"] = peak, rss_growth
        ctx.db.dispose()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
