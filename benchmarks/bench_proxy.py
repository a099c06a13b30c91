"""Requests per second through ``yard up``'s port proxy (``/proxy/jobs/ID/ROLE/I/PORT/…``):
a page load of ``--requests`` small GETs (100: a web app's page and its assets) with
``--concurrency`` in flight (6: a browser's connections per host), as a browser (the
portal's session cookie) and as a program (a bearer token); and the same GETs straight to
the task's port, the ceiling the proxy is measured against.

A real server (SQLite unless ``--database-url``) and a real job: ``python3 -m
http.server`` (threaded) serving a 1 KiB file on its declared port. Prints the median page
load time and requests/s of ``--runs`` page loads each way, and the server's CPU time per
request (the share of two cores the proxy takes; steadier than times on a busy machine).
Never asserts.

Run:  python benchmarks/bench_proxy.py [--requests 100] [--concurrency 6] [--runs 10] [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx
import psutil
from common import private_schema, yard_server

JOB = {
    "name": "bench-proxy",
    "taskRoles": {"main": {
        "resourcePerInstance": {"gpu": 0, "cpu": 0.5, "memoryMB": 256, "ports": {"http": 1}},
        "commands": [
            "mkdir site && head -c 1024 /dev/zero | tr '\\0' x > site/asset.txt",
            "exec python3 -m http.server $PAI_PORT_LIST_main_0_http --bind 127.0.0.1 --directory site",
        ],
    }},
}


async def page_load(client: httpx.AsyncClient, url: str, requests: int, concurrency: int) -> float:
    """Seconds for ``requests`` GETs of ``url``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            response = await client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:200]}")

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    return time.perf_counter() - start


async def measure(url: str, headers: dict[str, str], cookies: dict[str, str], args: argparse.Namespace) -> list[float]:
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    async with httpx.AsyncClient(headers=headers, cookies=cookies, limits=limits, timeout=30,
                                 trust_env=False) as client:
        await page_load(client, url, args.concurrency, args.concurrency)  # warm: connections, caches
        return [await page_load(client, url, args.requests, args.concurrency) for _ in range(args.runs)]


def report(name: str, times: list[float], requests: int, cpu_s: float | None = None) -> float:
    median = statistics.median(times)
    rate = requests / median
    cpu = f"  server CPU {cpu_s * 1000 / (requests * len(times)):5.2f} ms/request" if cpu_s is not None else ""
    print(f"{name:<34} page load p50 {median * 1000:7.1f} ms  max {max(times) * 1000:7.1f} ms  "
          f"{rate:7.0f} requests/s{cpu}")
    return rate


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="GETs per page load")
    parser.add_argument("--concurrency", type=int, default=6, help="GETs in flight")
    parser.add_argument("--runs", type=int, default=10, help="page loads each way")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with private_schema(args.database_url) as url:
        env = {"TRAINYARD_DATABASE_URL": url} if url else None
        run(args, env)


def run(args: argparse.Namespace, env: dict[str, str] | None) -> None:
    with yard_server(local_gpus=0, env=env) as server:
        job = server.client.submit(json.dumps(JOB), content_type="application/json").id
        deadline = time.monotonic() + 60
        while server.client.job(job).state != "RUNNING":
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job} did not run: {server.client.job(job).message}")
            time.sleep(0.05)
        port = server.client.job(job).attempts[-1].tasks[0].ports["http"][0]
        proxied = f"{server.url}/proxy/jobs/{job}/main/0/{port}/asset.txt"
        deadline = time.monotonic() + 30
        while httpx.get(proxied, headers=server.headers, timeout=5).status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError("http.server did not answer through the proxy")
            time.sleep(0.05)
        with httpx.Client(base_url=server.url, timeout=10) as browser:
            signed_in = browser.post("/signin", data={"token": server.token, "next": "/"})
            if signed_in.status_code != 303:
                raise RuntimeError(f"sign-in: {signed_in.status_code}")
            cookies = dict(browser.cookies)
        # The admin's own job: its browser session may open it (another user's it may not).
        print(f"{args.requests} GETs of 1 KiB per page load, {args.concurrency} in flight, {args.runs} page loads; "
              f"{'PostgreSQL' if args.database_url else 'SQLite'}")
        direct = report("straight to the task's port", asyncio.run(
            measure(f"http://127.0.0.1:{port}/asset.txt", {}, {}, args)), args.requests)
        yard = psutil.Process(server.process.pid)
        for name, headers, jar in (("through the proxy, session cookie", {}, cookies),
                                   ("through the proxy, bearer token", server.headers, {})):
            before = cpu_seconds(yard)
            times = asyncio.run(measure(proxied, headers, jar, args))
            rate = report(name, times, args.requests, cpu_seconds(yard) - before)
            print(f"{'':<34} {rate / direct:.0%} of straight")


if __name__ == "__main__":
    main()
