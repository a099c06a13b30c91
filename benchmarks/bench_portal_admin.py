"""The portal's Cluster, VCs, Users and Usage pages over a large store: server time per page
(target < 100 ms p50, < 300 ms p99, as for the home page) and size on the wire (target
< 200 KB; no compression is applied by the server).

Setup: ``bench_metrics_exposition.fill`` (1,000 nodes of 8 GPUs, 50 users, 3 VCs, 10,000
jobs of which 2,000 running, a minute of samples), plus 500 tokens; an admin's browser
session. Then each page ``--runs`` times (default 20) through the real app in process
(FastAPI's TestClient: no socket), and the cluster's node grid (what the page polls) for the
size of one node's card, to say what a page of nodes costs (the page shows 50 at a time).

Prints p50, p99 (the max for fewer than 100 runs), size, and ratios. Never asserts.

Run:  python benchmarks/bench_portal_admin.py [--runs 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_metrics_exposition import GPUS_PER_NODE, INTERVAL_S, JOBS, NODES, fill  # noqa: E402
from common import median, ratio_line  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from trainyard.core.clock import FakeClock  # noqa: E402
from trainyard.portal.pages_cluster import NODES_PER_PAGE  # noqa: E402
from trainyard.store.db import Database  # noqa: E402
from trainyard.store.rows import TokenRow  # noqa: E402

TARGET_P50_S, TARGET_P99_S, TARGET_BYTES = 0.100, 0.300, 200_000
TOKENS = 500
PAGES = ("/cluster", "/cluster/nodes", "/vcs", "/users", "/usage?period=30d", "/usage?period=30d&by=vc")


def p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)

    from fastapi.testclient import TestClient

    from trainyard.api.app import create_app
    from trainyard.backends.local.backend import LocalBackend
    from trainyard.backends.local.gpus import simulated_gpus
    from trainyard.services import web_sessions
    from trainyard.services.auth import bootstrap_admin
    from trainyard.web.callers import COOKIE
    from trainyard.web.context import AppContext

    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'bench.db'}")
        db.migrate()
        clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        with db.session() as s:
            token = bootstrap_admin(s, clock=clock)
        assert token is not None
        fill(db, clock.now(), 6)
        with db.session() as s:
            s.execute(insert(TokenRow), [
                {"user_id": 1000 + t % 50, "name": f"token {t}", "token_hash": f"{t:064x}", "prefix": "ty_bench00",
                 "created_at": clock.now(), "revoked": False} for t in range(TOKENS)])
            signed_in = web_sessions.sign_in_with_token(s, token, clock=clock)
        assert signed_in is not None
        print(f"store: sqlite; {NODES} nodes x {GPUS_PER_NODE} GPUs, {JOBS} jobs, 50 users, {TOKENS} tokens")
        backend = LocalBackend(Path(tmp) / "local", gpus=simulated_gpus(0), cpu_milli=1000, memory_mb=1024)
        ctx = AppContext(db=db, backend=backend, clock=clock, monitor_interval_seconds=INTERVAL_S)
        browser = TestClient(create_app(ctx), base_url="http://testserver")
        browser.cookies.set(COOKIE, signed_in.cookie)
        for path in PAGES:
            times = []
            for _ in range(args.runs):
                began = time.perf_counter()
                answer = browser.get(path)
                times.append(time.perf_counter() - began)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
            size = len(answer.content)
            print(ratio_line(f"{path} p50", median(times) * 1000, TARGET_P50_S * 1000, lower_is_better=True,
                             unit="ms"))
            print(ratio_line(f"{path} p99", p99(times) * 1000, TARGET_P99_S * 1000, lower_is_better=True,
                             unit="ms"))
            print(ratio_line(f"{path} size", size / 1000, TARGET_BYTES / 1000, lower_is_better=True, unit="KB"))
            if path == "/cluster/nodes":
                per_node = size / NODES_PER_PAGE
                print(f"  {per_node / 1000:.2f} KB per node of {GPUS_PER_NODE} GPUs ({NODES_PER_PAGE} nodes a page)")
            results[path] = median(times)
        db.dispose()
    return results


if __name__ == "__main__":
    main()
