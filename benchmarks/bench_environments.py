"""What environments (``yard env``) cost: the controller's per-cycle settling of builds, the
in-use check of a delete, and a real build, end to end.

1. In process, a fresh SQLite store (or ``--database-url``) holding ``--jobs`` ended jobs,
   ``--running`` unfinished ones and ``--envs`` environments (all READY but ten, whose build
   jobs still run): ``services.environments.settle_builds`` timed ``--runs`` times. The
   controller calls it every cycle (at most every 0.5 s idle), so its p50 is what an idle
   cluster pays (target < 2 ms: under 0.4 % of a core).
2. The same store: ``jobs_using`` (what ``yard env delete`` reads: the job file of every
   unfinished job), p50 (target < 100 ms for 1,000 unfinished jobs).
3. ``--builds`` real builds through ``yard up`` on this machine (local backend; as root, under
   per-user accounts and the sandbox): ``yard env create`` of a one-wheel environment
   (``--no-index --find-links``, a wheel made here) until READY, p50 seconds. No target: it is
   a venv and a pip install; the figure says what a user waits beyond pip itself.

Prints numbers and ratios to the targets; never asserts.

Run:  python benchmarks/bench_environments.py [--jobs 100000] [--running 1000] [--envs 1000] [--runs 50]
      [--builds 3] [--database-url URL]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import statistics
import tempfile
import time
import zipfile
from datetime import timedelta
from pathlib import Path

from common import percentile, ratio_line, yard_server
from sqlalchemy import insert

from trainyard.core.clock import FakeClock
from trainyard.services.auth import create_user
from trainyard.services.environments import jobs_using, settle_builds
from trainyard.spec.loading import parse_job
from trainyard.spec.templating import normalized_spec
from trainyard.store.db import Database
from trainyard.store.rows import EnvironmentRow, JobRow

SETTLE_TARGET_MS = 2.0
IN_USE_TARGET_MS = 100.0
BUILDING = 10


def fill(db: Database, clock: FakeClock, jobs: int, running: int, envs: int) -> None:
    plain = normalized_spec(parse_job("name: b\ntaskRoles:\n  m:\n    commands: ['sleep 1']\n"))
    in_env = normalized_spec(parse_job("name: b\nenvironment: env-0\ntaskRoles:\n  m:\n    commands: ['sleep 1']\n"))
    at = clock.now() - timedelta(days=1)
    with db.session() as session:
        user_id = create_user(session, "alice", is_admin=False, clock=clock).id
        rows = [{"id": j, "name": "b", "user_id": user_id, "vc": "default", "priority": "normal",
                 "state": "SUCCEEDED" if j <= jobs else "RUNNING", "spec": in_env if j % 10 == 0 else plain,
                 "submitted_at": at, "attempt": 0, "version": 1} for j in range(1, jobs + running + 1)]
        for start in range(0, len(rows), 10_000):
            session.execute(insert(JobRow), rows[start:start + 10_000])
        session.execute(insert(EnvironmentRow), [
            {"name": f"env-{e}", "owner_id": user_id, "kind": "custom", "visibility": "private",
             "path": f"/envs/alice/env-{e}", "requirements": "numpy\n",
             "state": "BUILDING" if e < BUILDING else "READY",
             # the ten still building are built by unfinished jobs
             "build_job_id": jobs + 1 + e if e < BUILDING else e + 1, "message": "", "created_at": at}
            for e in range(envs)])


def timed_ms(runs: int, call) -> list[float]:  # noqa: ANN001 - a zero-argument callable
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return times


def in_process(args: argparse.Namespace) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as folder:
        db = Database(args.database_url or f"sqlite:///{Path(folder) / 'bench.db'}")
        db.migrate()
        began = time.perf_counter()
        fill(db, clock, args.jobs, args.running, args.envs)
        print(f"store: {args.jobs:,} ended jobs, {args.running:,} unfinished, {args.envs:,} environments "
              f"({BUILDING} building), filled in {time.perf_counter() - began:.1f} s")

        def settle() -> None:
            with db.session() as session:
                assert settle_builds(session, clock) == []  # nothing ended: the idle cycle's case

        def in_use() -> None:
            with db.session() as session:
                jobs_using(session, "env-0")

        for name, call, target in (("settle_builds per controller cycle, p50", settle, SETTLE_TARGET_MS),
                                   (f"jobs_using over {args.running:,} unfinished jobs, p50", in_use,
                                    IN_USE_TARGET_MS)):
            times = timed_ms(args.runs, call)
            print(f"  {name}: p50 {statistics.median(times):.3f} ms, p99 {percentile(times, 99):.3f} ms")
            print("  " + ratio_line(name, statistics.median(times), target, lower_is_better=True, unit="ms"))
        db.dispose()


def one_wheel(folder: Path) -> None:
    """A one-module wheel (PEP 427, with its RECORD), as tests/api/wheels.py makes them."""
    info, files = "benchpkg-0.1.dist-info", {"benchpkg/__init__.py": "X = 1\n"}
    files[f"{info}/METADATA"] = "Metadata-Version: 2.1\nName: benchpkg\nVersion: 0.1\n"
    files[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / "benchpkg-0.1-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


def real_builds(builds: int) -> None:
    # Outside /tmp and the server's home, which the task sandbox hides from tasks.
    wheels = Path(tempfile.mkdtemp(prefix="bench-wheels-", dir="/var/lib"))
    wheels.chmod(0o755)
    one_wheel(wheels)
    requirements = f"--no-index\n--find-links {wheels}\nbenchpkg\n"
    try:
        with yard_server() as server:
            seconds = []
            for n in range(builds):
                began = time.perf_counter()
                server.client.create_environment(f"bench-{n}", requirements=requirements)
                env = server.client.wait_environment(f"bench-{n}", timeout=600, poll=0.1)
                seconds.append(time.perf_counter() - began)
                if env.state != "READY":
                    print(f"  build {n} {env.state}: {env.message}")
            print(f"real builds (venv + pip install of one local wheel, yard env create → READY), {builds}: "
                  f"p50 {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s")
    finally:
        shutil.rmtree(wheels, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--envs", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    in_process(args)
    if args.builds:
        real_builds(args.builds)


if __name__ == "__main__":
    main()
