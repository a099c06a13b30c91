"""API submit throughput over HTTP, issue 33's case: ≥ 300 accepted submits/s, p99 < 250 ms.

The default (``--clients``) is the issue's case. For each database (``--db sqlite``, the
default store, and ``postgresql``: ``$TRAINYARD_TEST_DATABASE_URL``, in a fresh schema of its
own per run, dropped afterwards) a fresh ``yard up --local-gpus R`` server is started in a
temporary home; R jobs (``--running``, default 4) take its R GPUs (``sleep 600``) and are
waited for until RUNNING, so the cluster runs jobs; then C clients (``--clients``, default 20,
each a thread with its own kept-alive HTTP connection and prebuilt JSON bodies) submit M jobs
(``-m``, default 10,000) of 1 GPU each as fast as the server answers. They all stay WAITING:
the queue grows to M while the controller schedules it and computes pending reasons.

Each client is its own user (``--users``, default one per client, made by the admin with a
token each): 10,000 submits from 20 users are 500 waiting jobs each, under the default limit
of 1,000 waiting jobs per user (``max_waiting_jobs_per_user``), so every submit is accepted.
``--users 1`` sends everything as the admin instead, with that limit raised for the run
(``TRAINYARD_MAX_WAITING_JOBS_PER_USER``): one user's count of waiting jobs grows to M.

Prints, per run: accepted submits/s over the whole run, latency p50/p99/max of each POST
(send to answer), refusals, the server's CPU per submit (from /proc; the controller's cycles
included) and the load generator's; and the ratios to the goals. ``--src DIR...`` runs the
server from each source tree in turn (``PYTHONPATH``), ``--repeat N`` times, alternating, so
that old and new code are compared side by side in the same session. Never asserts.

The load generator shares the machine with the server: it is kept cheap (``http.client`` on
a kept-alive connection, bodies built before the clock starts); its CPU is printed.

``--variants`` runs the older, smaller comparison instead (one fresh server each, one user,
YAML and JSON bodies, threads and asyncio clients): ``-m 2000 --threads 4 --concurrency 8 16``.

Run:  python benchmarks/bench_submit_throughput.py [-m 10000] [--clients 20] [--users 20] [--running 4]
      [--db sqlite postgresql] [--src /path/a/src /path/b/src] [--repeat 1] [--profile PREFIX]
      python benchmarks/bench_submit_throughput.py --variants [-m 2000] [--threads 4] [--concurrency 8 16]
      [--no-json]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from common import (  # noqa: E402
    Server,
    percentile,
    private_schema,
    process_cpu_seconds,
    ratio_line,
    tiny_job_json,
    tiny_job_yaml,
    yard_command,
    yard_server,
)

TARGET_JOBS_PER_S = 300.0
TARGET_P99_S = 0.25


def _hold_the_gpu(server: Server) -> None:
    job = server.client.submit(tiny_job_yaml("gpu-holder", gpu=1, command="sleep 600").encode())
    deadline = time.monotonic() + 30
    while server.client.job(job.id).state != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError("the GPU-holding job did not start")
        time.sleep(0.05)


def _bodies(kind: str, m: int) -> tuple[list[bytes], str]:
    if kind == "json":
        return [tiny_job_json(f"tp-{i}", gpu=1).encode() for i in range(m)], "application/json"
    return [tiny_job_yaml(f"tp-{i}", gpu=1).encode() for i in range(m)], "application/yaml"


def run_threads(server: Server, m: int, threads: int, kind: str) -> tuple[float, int]:
    bodies, content_type = _bodies(kind, m)
    next_index = iter(range(m))
    lock = threading.Lock()
    errors = [0]

    def worker() -> None:
        with httpx.Client(base_url=server.url + "/api/v1", headers={**server.headers, "Content-Type": content_type},
                          timeout=60) as http:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                if http.post("/jobs", content=bodies[i]).status_code != 201:
                    with lock:
                        errors[0] += 1

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - t0, errors[0]


def run_async(server: Server, m: int, concurrency: int, kind: str) -> tuple[float, int]:
    bodies, content_type = _bodies(kind, m)

    async def go() -> tuple[float, int]:
        errors = 0
        queue = iter(range(m))
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=server.url + "/api/v1", limits=limits, timeout=60,
                                     headers={**server.headers, "Content-Type": content_type}) as http:

            async def worker() -> None:
                nonlocal errors
                for i in queue:  # shared iterator: each index is taken once
                    if (await http.post("/jobs", content=bodies[i])).status_code != 201:
                        errors += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0, errors

    return asyncio.run(go())


def one_variant(label: str, m: int, fn, *args) -> float:
    with yard_server(local_gpus=1, stop_jobs=False) as server:
        _hold_the_gpu(server)
        # warm-up: a few submissions so first-request costs are not counted
        for i in range(5):
            server.client.submit(tiny_job_yaml(f"warm-{i}", gpu=1).encode())
        cpu0, own0 = process_cpu_seconds(server.process.pid), time.process_time()
        elapsed, errors = fn(server, m, *args)
        cpu = process_cpu_seconds(server.process.pid) - cpu0
        own = time.process_time() - own0
    rate = (m - errors) / elapsed
    print(f"  {label:<20} {m} jobs in {elapsed:6.2f} s = {rate:6.1f} jobs/s; server CPU "
          f"{cpu / m * 1000:.2f} ms/job ({cpu / elapsed * 100:.0f}% of a core), load generator "
          f"{own / m * 1000:.2f} ms/job{f'  ({errors} errors)' if errors else ''}")
    return rate


def variants_main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description="the older comparison of client kinds (--variants)")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("-m", "--jobs", type=int, default=2000, help="jobs per variant (default 2000)")
    parser.add_argument("--threads", type=int, default=4, help="threads for the threaded client (default 4)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16],
                        help="requests in flight for the async client (default 8 16)")
    parser.add_argument("--no-json", action="store_true", help="skip the JSON-body variant")
    args = parser.parse_args(argv)
    m = args.jobs
    print(f"== submit throughput: {m} WAITING jobs per variant, SQLite, fresh server each ==")
    rates: dict[str, float] = {}
    rates[f"threads={args.threads} yaml"] = one_variant(f"threads={args.threads} yaml", m, run_threads,
                                                        args.threads, "yaml")
    for c in args.concurrency:
        rates[f"async c={c} yaml"] = one_variant(f"async c={c} yaml", m, run_async, c, "yaml")
    if not args.no_json:
        best_c = max(args.concurrency, key=lambda c: rates[f"async c={c} yaml"])
        rates[f"async c={best_c} json"] = one_variant(f"async c={best_c} json", m, run_async, best_c, "json")
    best_label = max(rates, key=rates.get)
    best = rates[best_label]
    print(f"  best: {best_label}")
    print("  " + ratio_line("submit throughput (best)", best, TARGET_JOBS_PER_S, lower_is_better=False,
                            unit="jobs/s"))
    return {"rates": rates, "best": best, "best_label": best_label, "target": TARGET_JOBS_PER_S,
            "ratio": best / TARGET_JOBS_PER_S}


# --- issue 33's case: many clients, many users, one server per database ---------------------


def _hold_gpus(server: Server, running: int) -> None:
    """``running`` jobs of 1 GPU each (``sleep 600``), waited for until all run."""
    ids = [server.client.submit(tiny_job_yaml(f"holder-{i}", gpu=1, command="sleep 600").encode()).id
           for i in range(running)]
    deadline = time.monotonic() + 60
    while any(server.client.job(i).state != "RUNNING" for i in ids):
        if time.monotonic() > deadline:
            raise TimeoutError("the GPU-holding jobs did not all start")
        time.sleep(0.1)


def _tokens(server: Server, users: int) -> list[str]:
    """One token per user: the admin's alone for ``users == 1``, else ``users`` new users'."""
    if users == 1:
        return [server.token]
    tokens = []
    for i in range(users):
        server.client.create_user(f"bench{i}")
        tokens.append(server.client.create_token(user=f"bench{i}").token)
    return tokens


def run_clients(server: Server, m: int, clients: int, tokens: list[str]) -> dict:
    """``clients`` threads, each on one kept-alive connection with one user's token, send
    ``m`` JSON submits between them as fast as they are answered."""
    bodies = [tiny_job_json(f"tp-{i}", gpu=1).encode() for i in range(m)]
    taken = itertools.count()  # next() on it is atomic under the GIL
    start = threading.Barrier(clients + 1)
    results: list[list[tuple[float, float, int]]] = [[] for _ in range(clients)]

    def client(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        headers = {"Authorization": f"Bearer {tokens[k % len(tokens)]}", "Content-Type": "application/json"}
        conn.connect()
        mine = results[k]
        start.wait()
        try:
            while (i := next(taken)) < m:
                t0 = time.perf_counter()
                conn.request("POST", "/api/v1/jobs", body=bodies[i], headers=headers)
                response = conn.getresponse()
                response.read()
                t1 = time.perf_counter()
                mine.append((t1, t1 - t0, response.status))
        finally:
            conn.close()

    pool = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in pool:
        t.start()
    cpu0, own0 = process_cpu_seconds(server.process.pid), time.process_time()
    t_start = time.perf_counter()
    start.wait()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - t_start
    cpu = process_cpu_seconds(server.process.pid) - cpu0
    own = time.process_time() - own0
    answers = sorted(a for mine in results for a in mine)
    accepted = [a for a in answers if a[2] == 201]
    tenth = max(1, len(accepted) // 10)

    def rate(part: list[tuple[float, float, int]]) -> float:
        return (len(part) - 1) / (part[-1][0] - part[0][0]) if len(part) > 1 and part[-1][0] > part[0][0] else 0.0

    latencies = [a[1] for a in answers]
    return {
        "accepted": len(accepted), "refused": len(answers) - len(accepted),
        "statuses": sorted({a[2] for a in answers}), "elapsed_s": elapsed,
        "rate": len(accepted) / elapsed, "first_tenth_rate": rate(accepted[:tenth]),
        "last_tenth_rate": rate(accepted[-tenth:]),
        "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99), "max_s": max(latencies),
        "server_cpu_ms": cpu / max(1, len(answers)) * 1000, "server_cores": cpu / elapsed,
        "client_cpu_ms": own / max(1, len(answers)) * 1000,
    }


def _cycles(server: Server) -> tuple[int, float]:
    """The controller's scheduling cycles so far: how many, and their seconds (/metrics)."""
    text = httpx.get(server.url + "/metrics", headers=server.headers, timeout=60).text
    found = {}
    for line in text.splitlines():
        for key in ("count", "sum"):
            if line.startswith(f"trainyard_scheduler_cycle_duration_seconds_{key} "):
                found[key] = float(line.split()[1])
    return int(found.get("count", 0)), found.get("sum", 0.0)


runs_so_far: list[str] = []  # names each run's profile


def one_case(db: str, src: str | None, args: argparse.Namespace) -> dict:
    """One fresh server on ``db``, running the code under ``src``, else the installed ``yard``
    (with PYTHONPATH as given)."""
    with private_schema(os.environ["TRAINYARD_TEST_DATABASE_URL"] if db == "postgresql" else None) as pg_url:
        env = {}
        if pg_url:
            env["TRAINYARD_DATABASE_URL"] = pg_url
        if src:
            env["PYTHONPATH"] = src
        if args.users == 1:
            env["TRAINYARD_MAX_WAITING_JOBS_PER_USER"] = str(args.jobs + 1000)
        spy = ["py-spy", "record", "--threads", "--gil", "--nonblocking", "--rate", "100", "--format", "raw",
               "--output", f"{args.profile}.{db}.{len(runs_so_far)}", "--"] if args.profile else None
        runs_so_far.append(db)
        with yard_server(local_gpus=args.running, stop_jobs=False, env=env,
                         command=[*spy, *yard_command()] if spy else None) as server:
            _hold_gpus(server, args.running)
            tokens = _tokens(server, args.users)
            for token in tokens:  # warm-up, one submit per user: first-request costs are not counted
                httpx.post(server.url + "/api/v1/jobs", content=tiny_job_json("warm", gpu=1),
                           headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                           timeout=60).raise_for_status()
            cycles0 = _cycles(server)
            result = run_clients(server, args.jobs, args.clients, tokens)
            cycles1 = _cycles(server)
    count, seconds = cycles1[0] - cycles0[0], cycles1[1] - cycles0[1]
    result["cycles"], result["cycle_mean_s"] = count, seconds / count if count else float("nan")
    print(f"  {db:<10} {src or 'installed yard':<34} {result['accepted']:>6} accepted in "
          f"{result['elapsed_s']:6.1f} s = {result['rate']:6.1f}/s (first tenth {result['first_tenth_rate']:.0f}/s, "
          f"last tenth {result['last_tenth_rate']:.0f}/s); p50 {result['p50_s'] * 1000:.0f} ms, "
          f"p99 {result['p99_s'] * 1000:.0f} ms, "
          f"max {result['max_s'] * 1000:.0f} ms; server CPU {result['server_cpu_ms']:.2f} ms/submit "
          f"({result['server_cores'] * 100:.0f}% of a core), load generator {result['client_cpu_ms']:.2f} ms/submit"
          + f"; {count} scheduling cycles, mean {result['cycle_mean_s'] * 1000:.0f} ms"
          + (f"; {result['refused']} refused ({result['statuses']})" if result["refused"] else ""), flush=True)
    return result


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if "--variants" in argv:
        return variants_main(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--jobs", type=int, default=10_000, help="submits per run (default 10,000)")
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients (default 20)")
    parser.add_argument("--users", type=int, default=None,
                        help="users the clients submit as (default: one per client); 1: the admin, limit raised")
    parser.add_argument("--running", type=int, default=4, help="GPUs, each held by a running job (default 4)")
    parser.add_argument("--db", nargs="+", choices=("sqlite", "postgresql"), default=["sqlite", "postgresql"],
                        help="databases (default both; postgresql needs $TRAINYARD_TEST_DATABASE_URL)")
    parser.add_argument("--src", nargs="+", default=[None],
                        help="source trees to run the server from, in turn (default: the installed `yard`, "
                             "PYTHONPATH as given)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (database, source) pair")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="run each server under py-spy (the thread holding the interpreter lock), its raw "
                             "samples to PREFIX.DB.N (the server CPU printed is then py-spy's)")
    args = parser.parse_args(argv)
    args.users = args.clients if args.users is None else args.users
    dbs = [db for db in args.db if db == "sqlite" or os.environ.get("TRAINYARD_TEST_DATABASE_URL")]
    if dbs != args.db:
        print("  postgresql: skipped (set TRAINYARD_TEST_DATABASE_URL)")
    print(f"== submit throughput: {args.jobs} submits from {args.clients} clients as {args.users} user(s), "
          f"{args.running} jobs running, the queue growing to {args.jobs}; {args.repeat} run(s) each ==", flush=True)
    runs: dict[tuple[str, str | None], list[dict]] = {}
    for _ in range(args.repeat):
        for db in dbs:
            for src in args.src:
                runs.setdefault((db, src), []).append(one_case(db, src, args))
    best: dict[str, dict] = {}
    for (db, src), results in runs.items():
        top = max(results, key=lambda r: r["rate"])
        label = f"{db}, {src or 'installed yard'}"
        print(f"  best of {len(results)}: {label}")
        print("    " + ratio_line("accepted submits/s", top["rate"], TARGET_JOBS_PER_S, lower_is_better=False,
                                  unit="/s"))
        print("    " + ratio_line("p99 latency", top["p99_s"], TARGET_P99_S, lower_is_better=True, unit="s"))
        best[label] = top
    nan = float("nan")
    return {"runs": best, "best": max((r["rate"] for r in best.values()), default=nan),
            "worst": min((r["rate"] for r in best.values()), default=nan),
            "worst_p99_s": max((r["p99_s"] for r in best.values()), default=nan),
            "target": TARGET_JOBS_PER_S, "target_p99_s": TARGET_P99_S}


if __name__ == "__main__":
    main()
