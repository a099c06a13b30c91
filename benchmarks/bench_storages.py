"""What storages cost the paths they are on: the submit-time check of a job's storages
against its owner's grants, their resolution when a task launches, and a removal's scan of
the waiting jobs (no target in the issue: printed beside what they add to).

In process, no server: a real store (SQLite file; PostgreSQL with --database-url), 20
storages granted to groups and users, and ``--jobs`` waiting jobs of which one in ten
mounts four storages. Times

(a) ``check_storage_uses`` for a job with no storages and with four, beside a whole
    ``submit_job`` of the same job (what a submit pays in all),
(b) ``task_mounts`` for a task of the four-storage job (what reconcile pays per launch),
(c) a refused ``revoke_storage_grant`` with the waiting jobs in the store (the scan that
    finds the jobs a removal would orphan).

Prints p50 / p90 per measure and the share of the submit. Never asserts.

Run:  python benchmarks/bench_storages.py [--jobs 1000] [--runs 200] [--database-url URL]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile  # noqa: E402

from trainyard.core.clock import SystemClock  # noqa: E402
from trainyard.scheduler.snapshot import NodeState  # noqa: E402
from trainyard.services import admin, auth, removal  # noqa: E402
from trainyard.services import jobs as job_service  # noqa: E402
from trainyard.services import storages as storage_service  # noqa: E402
from trainyard.services.errors import Conflict  # noqa: E402
from trainyard.spec.loading import parse_job  # noqa: E402
from trainyard.store.db import Database  # noqa: E402
from trainyard.store.rows import UserRow  # noqa: E402

NODES = [NodeState("n1", cpu_milli=64000, memory_mb=1 << 20)]
PLAIN = "name: plain\ntaskRoles:\n  w:\n    commands: [run]\n"
MOUNTING = ("name: mounting\nstorages: [{name: s0}, {name: s1, readOnly: true}, {name: s2, mountPath: /data}]\n"
            "taskRoles:\n  w:\n    commands: [run]\n    storages: [{name: s3, subPath: alice/x}]\n")


def timed(runs: int, action: Callable[[], object]) -> list[float]:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def show(what: str, seconds: list[float], whole: float | None = None) -> None:
    p50, p90 = percentile(seconds, 50), percentile(seconds, 90)
    share = f"   {p50 / whole:6.1%} of a submit" if whole else ""
    print(f"{what:<58} p50 {p50 * 1000:8.3f} ms   p90 {p90 * 1000:8.3f} ms{share}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="waiting jobs in the store")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--database-url", help="default: a SQLite file in a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(args.database_url or f"sqlite:///{tmp}/bench.db")
        db.migrate()
        clock = SystemClock()
        with db.session() as s:
            root = auth.create_user(s, "root", is_admin=True, clock=clock)
            alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
            for g in range(10):
                admin.create_group(s, f"g{g}", clock=clock)
                admin.add_member(s, f"g{g}", "alice")
            for i in range(20):
                storage_service.create_storage(s, f"s{i}", f"/srv/s{i}", read_only=False, kind="nfs",
                                               description="", clock=clock)
                storage_service.grant_storage(s, f"s{i}", f"@g{i % 10}", read_only=False)
        plain, mounting = parse_job(PLAIN), parse_job(MOUNTING)
        with db.session() as s:
            user = s.get(UserRow, alice.id)
            for i in range(args.jobs):
                job_service.submit_job(s, user, mounting if i % 10 == 0 else plain, clock=clock, nodes=NODES)
        print(f"{args.jobs} waiting jobs ({args.jobs // 10} mount 4 storages), 20 storages, "
              f"{'SQLite' if not args.database_url else args.database_url.split(':')[0]}")
        for name, spec in (("no storages", plain), ("4 storages", mounting)):
            def submit_it(spec=spec) -> None:  # noqa: ANN001 - the loop's spec, bound now
                with db.session() as s:
                    job_service.submit_job(s, s.get(UserRow, alice.id), spec, clock=clock, nodes=NODES)
                    s.rollback()

            whole = timed(args.runs, submit_it)
            show(f"(a) submit_job, {name}", whole)
            with db.session() as s:  # the check alone, in the submit's open session
                owner = s.get(UserRow, alice.id)
                checks = timed(args.runs, lambda s=s, owner=owner, spec=spec: storage_service.check_storage_uses(
                    s, owner, spec))
            show(f"(a) of it, check_storage_uses, {name}", checks, percentile(whole, 50))

        with db.session() as s:  # in reconcile's open session
            owner = s.get(UserRow, alice.id)
            show("(b) task_mounts, one task of the 4-storage job",
                 timed(args.runs, lambda: storage_service.task_mounts(s, owner, mounting, "w")))

        def refused_revoke() -> None:
            try:
                with db.session() as s:
                    removal.revoke_storage_grant(s, "s0", "@g0", force=False, by=s.get(UserRow, root.id), clock=clock)
            except Conflict:
                pass

        show(f"(c) a refused revoke, scanning {args.jobs} waiting jobs", timed(max(3, args.runs // 20), refused_revoke))
        db.dispose()


if __name__ == "__main__":
    main()
