"""API submit throughput over HTTP on SQLite (target: ≥ 300 jobs/s).

For each variant a fresh ``yard up --local-gpus 1`` server is started (temporary home,
SQLite). A first job takes the one GPU (``sleep 600``, gpu 1) and is waited for until
RUNNING; then M jobs asking for 1 GPU each are submitted as fast as possible. They all stay
WAITING, so the controller keeps scheduling a growing queue and computing pending reasons
while the API accepts submissions — as on a busy cluster.

Variants (each on its own fresh server, so queues do not carry over):

* ``threads``: T threads (default 4), each with its own ``httpx.Client``, YAML bodies;
* ``async``:   one ``httpx.AsyncClient`` with C requests in flight (default 8 and 16), YAML;
* ``async-json``: the better async concurrency again with JSON bodies instead of YAML.

Prints jobs/s for each (with the server's CPU time per job, read from /proc, and the
load generator's own CPU per job), the best, and its ratio to the 300 jobs/s target. Never asserts.
The load generator runs on the same (small) machine as the server, so it steals CPU from it;
keep T and C small.

Run:  python benchmarks/bench_submit_throughput.py [-m 2000] [--threads 4] [--concurrency 8 16]
      [--no-json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from common import Server, process_cpu_seconds, ratio_line, tiny_job_json, tiny_job_yaml, yard_server  # noqa: E402

TARGET_JOBS_PER_S = 300.0


def _hold_the_gpu(server: Server) -> None:
    job = server.client.submit(tiny_job_yaml("gpu-holder", gpu=1, command="sleep 600").encode())
    deadline = time.monotonic() + 30
    while server.client.job(job["id"])["state"] != "RUNNING":
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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    main()
