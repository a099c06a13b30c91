"""Listing one page of jobs through the CLI with 100,000 jobs in the store (target < 0.5 s),
and ``yard --help`` (target < 0.3 s).

Setup (the robust path: the server's own bootstrap creates the admin user and client.json):

1. start ``yard up --local-gpus 1`` once on a fresh temporary home, so it migrates the SQLite
   store, creates the ``admin`` user, writes ``client.json``, and records the node; stop it;
2. bulk insert rows straight into that SQLite store with SQLAlchemy
   (``session.execute(insert(JobRow), [...])``): a second user ``alice`` and N jobs (default
   100,000) — 90 % admin's, 10 % alice's; 1 % WAITING (asking for 2 GPUs on a 1-GPU node, so
   they wait with a NO_FIT reason and never launch), the rest SUCCEEDED / FAILED / STOPPED —
   each with a valid normalised spec (``parse_job`` + ``normalized_spec``) and its
   ``submitted`` and final ``job_events`` rows;
3. start the server again on the same home (no bootstrap: users exist; the token is kept) and
   let the controller finish its first cycle over the waiting jobs.

Then, each ``--runs`` times (default 10), as subprocesses with wall-clock timing:

* ``yard --help``                        (CLI start-up only; target < 0.3 s)
* ``yard jobs --limit 50``               (target < 0.5 s, like every listing below)
* ``yard jobs --state WAITING``
* ``yard jobs --user admin`` / ``--user alice``
* ``yard jobs --limit 50 --before <cursor of page 20>``

and, to split CLI from server time, the same listings as plain ``GET /api/v1/jobs`` over a
kept-alive httpx connection. Prints p50 (and max) and ratios to the targets. Never asserts.

Run:  python benchmarks/bench_list_jobs.py [--jobs 100000] [--runs 10]
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from common import median, ratio_line, yard_command, yard_server  # noqa: E402

TARGET_PAGE_S = 0.5
TARGET_HELP_S = 0.3
PAGE = 50
BATCH = 10_000


def _spec_templates() -> dict[str, dict]:
    from trainyard.spec.loading import parse_job
    from trainyard.spec.templating import normalized_spec

    base = """\
name: {name}
parameters: {{lr: 0.001, epochs: 10}}
taskRoles:
  train:
    instances: 1
    resourcePerInstance: {{gpu: {gpu}, cpu: 2, memoryMB: 4096}}
    commands:
      - python train.py --lr <% $parameters.lr %> --epochs <% $parameters.epochs %>
"""
    return {
        "done": normalized_spec(parse_job(base.format(name="tmpl", gpu=1))),
        "waiting": normalized_spec(parse_job(base.format(name="tmpl", gpu=2))),
    }


def fill_store(db_url: str, n_jobs: int, seed: int = 7) -> dict[str, int]:
    """Bulk insert ``n_jobs`` jobs (and their events) into an already bootstrapped store."""
    from sqlalchemy import insert, select

    from trainyard.store.db import Database
    from trainyard.store.rows import JobEventRow, JobRow, UserRow

    rng = random.Random(seed)
    templates = _spec_templates()
    db = Database(db_url)
    db.migrate()  # a no-op on a store the server created; keeps this usable on its own
    now = datetime.now(UTC)
    with db.session() as session:
        admin = session.scalar(select(UserRow).where(UserRow.name == "admin"))
        if admin is None:
            raise RuntimeError("no admin user: start the server once on this home first")
        alice = session.scalar(select(UserRow).where(UserRow.name == "alice"))
        if alice is None:
            session.execute(insert(UserRow), [{"name": "alice", "is_admin": False, "created_at": now}])
            alice = session.scalar(select(UserRow).where(UserRow.name == "alice"))
        admin_id, alice_id = admin.id, alice.id
    counts: dict[str, int] = {}
    start = now - timedelta(seconds=n_jobs * 30)
    next_id = 1
    with db.session() as session:
        last = session.scalar(select(JobRow.id).order_by(JobRow.id.desc()).limit(1))
        next_id = (last or 0) + 1
    done = 0
    while done < n_jobs:
        jobs, events = [], []
        for k in range(min(BATCH, n_jobs - done)):
            i = done + k
            job_id = next_id + i
            r = rng.random()
            state = ("WAITING" if r < 0.01 else "FAILED" if r < 0.13 else "STOPPED" if r < 0.20
                     else "SUCCEEDED")
            counts[state] = counts.get(state, 0) + 1
            owner = alice_id if rng.random() < 0.10 else admin_id
            owner_name = "alice" if owner == alice_id else "admin"
            name = f"bench-{job_id}"
            submitted = start + timedelta(seconds=i * 30)
            final = state != "WAITING"
            started = submitted + timedelta(seconds=5) if final and state != "STOPPED" else None
            finished = submitted + timedelta(seconds=rng.randint(60, 7200)) if final else None
            spec = {**templates["waiting" if state == "WAITING" else "done"], "name": name}
            jobs.append({
                "id": job_id, "name": name, "user_id": owner, "vc": "default", "priority": "normal",
                "state": state, "spec": spec, "submitted_at": submitted, "started_at": started,
                "finished_at": finished, "attempt": 0, "retries_used": 0, "grace_seconds": 30.0,
                "pending_reason": None, "pending_message": None, "pending_position": None,
                "state_message": {"FAILED": "train/0 exited with 1",
                                  "STOPPED": f"stopped by {owner_name}"}.get(state, ""),
                "exit_code": {"SUCCEEDED": 0, "FAILED": 1}.get(state), "stopped_by":
                    owner_name if state == "STOPPED" else None, "version": 1,
            })
            events.append({"job_id": job_id, "at": submitted, "kind": "submitted",
                           "message": f"submitted by {owner_name}"})
            if final:
                events.append({"job_id": job_id, "at": finished, "kind": state.lower(),
                               "message": f"job {state.lower()}"})
        with db.session() as session:
            session.execute(insert(JobRow), jobs)
            session.execute(insert(JobEventRow), events)
        done += len(jobs)
    db.dispose()
    return counts


def _time_cli(args: list[str], env: dict[str, str], runs: int) -> tuple[list[float], str]:
    times, out = [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([*yard_command(), *args], env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        out = proc.stdout if proc.returncode == 0 else f"exit {proc.returncode}: {proc.stderr}"
    return times, out


def _time_http(http: httpx.Client, params: dict, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        http.get("/jobs", params=params).raise_for_status()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in the store (default 100000)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (default 10)")
    args = parser.parse_args(argv)
    print(f"== listing jobs through the CLI with {args.jobs:,} jobs in the store; {args.runs} runs each ==")
    home = Path(tempfile.mkdtemp(prefix="yard-bench-list-"))
    results: dict[str, float] = {}
    try:
        with yard_server(local_gpus=1, home=home):
            pass  # bootstrap: schema, admin user, token in client.json, node inventory
        t0 = time.perf_counter()
        counts = fill_store(f"sqlite:///{home / 'trainyard.db'}", args.jobs)
        print(f"  filled the store in {time.perf_counter() - t0:.1f} s: "
              + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())))
        with yard_server(local_gpus=1, home=home, stop_jobs=False) as server:
            # let the controller's first cycle over the waiting jobs finish (pending reasons)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                items = server.client.jobs(state="WAITING", limit=1)["items"]
                if not items or items[0].get("pending"):
                    break
                time.sleep(0.2)
            # the cursor for page 20: walk 19 pages
            before = None
            for _ in range(19):
                before = server.client.jobs(limit=PAGE, before=before)["next"]
            env = server.env
            cases = [
                ("yard jobs --limit 50", ["jobs", "--limit", str(PAGE)], {"limit": PAGE}),
                ("yard jobs --state WAITING", ["jobs", "--state", "WAITING"], {"state": "WAITING", "limit": 20}),
                ("yard jobs --user admin", ["jobs", "--user", "admin"], {"user": "admin", "limit": 20}),
                ("yard jobs --user alice", ["jobs", "--user", "alice"], {"user": "alice", "limit": 20}),
                ("yard jobs --limit 50 --before <page 20>", ["jobs", "--limit", str(PAGE), "--before", str(before)],
                 {"limit": PAGE, "before": before}),
            ]
            help_times, _ = _time_cli(["--help"], env, args.runs)
            help_p50 = median(help_times)
            print(f"  yard --help: p50 {help_p50 * 1000:.0f} ms, max {max(help_times) * 1000:.0f} ms")
            print("  " + ratio_line("yard --help p50", help_p50, TARGET_HELP_S, lower_is_better=True, unit="s"))
            # import cost of the client side of the CLI (what `yard jobs` loads beyond --help)
            imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import trainyard.cli.commands"],
                                 capture_output=True, text=True, env=env)
            top = sorted(
                ((int(line.split("|")[1]), line.split("|")[2].strip()) for line in imp.stderr.splitlines()
                 if line.startswith("import time:") and line.split("|")[1].strip().isdigit()),
                reverse=True,
            )[:1]
            t_cmd = []
            for _ in range(3):
                t1 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "import trainyard.cli.commands"], env=env, check=True)
                t_cmd.append(time.perf_counter() - t1)
            print(f"  python -c 'import trainyard.cli.commands' (CLI client-side imports): "
                  f"p50 {median(t_cmd) * 1000:.0f} ms (cumulative import of trainyard.cli.commands "
                  f"{top[0][0] / 1000 if top else float('nan'):.0f} ms)")
            results["help_p50_s"] = help_p50
            with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=60) as http:
                for label, cli_args, params in cases:
                    cli_times, out = _time_cli(cli_args, env, args.runs)
                    http_times = _time_http(http, params, args.runs)
                    rows = sum(1 for line in out.strip().splitlines()[1:] if not line.startswith("(more"))
                    p50 = median(cli_times)
                    results[label] = p50
                    print(f"  {label:<40} CLI p50 {p50 * 1000:6.0f} ms (max {max(cli_times) * 1000:5.0f}); "
                          f"HTTP GET p50 {median(http_times) * 1000:6.1f} ms; {rows} rows; "
                          f"ratio {p50 / TARGET_PAGE_S:.2f}x of {TARGET_PAGE_S:g} s "
                          f"({'MEETS' if p50 < TARGET_PAGE_S else 'MISSES'})")
                    if out.startswith("exit"):
                        print(f"    failed: {out.strip()[:300]}")
            worst = max(v for k, v in results.items() if k.startswith("yard jobs"))
            print("  " + ratio_line("slowest listing p50 (CLI)", worst, TARGET_PAGE_S, lower_is_better=True, unit="s"))
            results["worst_list_p50_s"] = worst
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
