"""Datasets near the GPUs (issue 35): the second job that reads a dataset, and the second run
of a training loop, against the first, with the data behind a deliberately slow source.

A real local backend (in process, no server: the cache is the backend's) and a real HTTP
source on 127.0.0.1 that serves a tar of ``--mb`` MiB of random data (incompressible) at
``--mbps`` MiB/s. Each run registers a new version of the dataset (so its first job always
misses) and launches two jobs one after the other, each a "training loop" that reads every
file of the dataset once (an epoch) from its mountPath:

(a) job 1: its dataset is fetched into the node's cache before it starts (a miss);
(b) job 2: it finds the dataset in the cache (a hit);
(c) for reference, what each job pays without a cache: the same loop reading the data from
    the source itself, as a job reads a remote storage today.

Per job: wall seconds from launch to the task's first line ("start": the loop begins, its
data there) and to its end. Wall time, not CPU time: what is measured is waiting on the
throttled source, which a busy machine barely changes (best of ``--runs``; the median is
printed too). Goal (issue 35): job 2 reads >= 2x faster than job 1. Never asserts.

Run:  python benchmarks/bench_datasets.py [--mb 32] [--mbps 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from backends.datasource import serving  # noqa: E402  (the tests' real HTTP source)

from trainyard.backends.base import DatasetFetch, TaskKey, TaskLaunch  # noqa: E402
from trainyard.backends.local.backend import LocalBackend  # noqa: E402
from trainyard.backends.local.gpus import simulated_gpus  # noqa: E402

GOAL = 2.0
LOOP = """\
echo start
python3 - <<'EOF'
import os, time
t = time.perf_counter(); n = 0
for top, _, files in os.walk(os.environ["DATA"]):
    for f in files:
        with open(os.path.join(top, f), "rb") as data:
            while chunk := data.read(1 << 20):
                n += len(chunk)
print(f"epoch {n} bytes in {time.perf_counter() - t:.3f} s")
EOF
"""
# Without a cache: the loop streams the archive from the source (as from a remote storage).
UNCACHED = """\
echo start
python3 - <<'EOF'
import os, tarfile, time, urllib.request
t = time.perf_counter(); n = 0
with urllib.request.urlopen(os.environ["URL"]) as response, tarfile.open(fileobj=response, mode="r|*") as tar:
    for member in tar:
        if member.isreg():
            n += len(tar.extractfile(member).read())
print(f"epoch {n} bytes in {time.perf_counter() - t:.3f} s")
EOF
"""


def archive(mb: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i in range(mb):
            info = tarfile.TarInfo(f"shard-{i:04d}.bin")
            info.size = 1 << 20
            tar.addfile(info, io.BytesIO(os.urandom(1 << 20)))
    return out.getvalue()


def run_job(backend: LocalBackend, job_id: int, script: str, env: dict[str, str],
            datasets: tuple[DatasetFetch, ...] = ()) -> tuple[float, float, str]:
    """(seconds to the task's first line, seconds to its end, its log)."""
    key = TaskKey(job_id, 0, "worker", 0)
    node = backend.inventory()[0].name
    began = time.perf_counter()
    backend.launch(TaskLaunch(key, node, script, env, datasets=datasets))
    started = None
    while True:
        log = backend.read_log(key).data.decode()
        now = time.perf_counter()
        if started is None and "start\n" in log:
            started = now - began
        status = backend.observe([key])[key]
        if not status.running:
            log = backend.read_log(key).data.decode()
            if status.exit_code != 0:
                raise SystemExit(f"job {job_id} failed ({status.exit_code}): {log}")
            return started if started is not None else now - began, now - began, log
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=32, help="the dataset's size, MiB")
    parser.add_argument("--mbps", type=float, default=16.0, help="the source's speed, MiB/s")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    body = archive(args.mb)
    rows: dict[str, list[tuple[float, float]]] = {"job 1 (miss: fetched)": [], "job 2 (hit: cached)": [],
                                                   "no cache (each job)": []}
    with tempfile.TemporaryDirectory() as tmp, serving() as source:
        source.bytes_per_second = args.mbps * (1 << 20)
        url = source.add("/set.tar", body)
        backend = LocalBackend(Path(tmp) / "state", gpus=simulated_gpus(1),
                               dataset_cache=(Path(tmp) / "cache", len(body) * 5 // 2),
                               dataset_sources=(3600.0, ("127.0.0.1",)))  # the throttled source's host
        job = 0
        for run in range(args.runs):
            dataset = DatasetFetch("bench", url, f"run-{run}", "/data/bench")
            env = {"DATA": backend.datasets.entry(dataset)}
            for label in ("job 1 (miss: fetched)", "job 2 (hit: cached)"):
                job += 1
                first, end, _ = run_job(backend, job, LOOP, env, (dataset,))
                rows[label].append((first, end))
            job += 1
            first, end, _ = run_job(backend, job, UNCACHED, {"URL": url})
            rows["no cache (each job)"].append((first, end))
        cache = backend.dataset_caches()[0]
    print(f"dataset {args.mb} MiB at {args.mbps:g} MiB/s from 127.0.0.1; {args.runs} runs; wall seconds "
          "(best / median)")
    print(f"{'':<24}{'to first line':>22}{'to end (an epoch)':>26}")
    for label, values in rows.items():
        firsts, ends = [v[0] for v in values], [v[1] for v in values]
        print(f"{label:<24}{min(firsts):10.3f} / {statistics.median(firsts):7.3f}"
              f"{min(ends):14.3f} / {statistics.median(ends):7.3f}")
    miss = statistics.median(v[1] for v in rows["job 1 (miss: fetched)"])
    hit = statistics.median(v[1] for v in rows["job 2 (hit: cached)"])
    start_miss = statistics.median(v[0] for v in rows["job 1 (miss: fetched)"])
    start_hit = statistics.median(v[0] for v in rows["job 2 (hit: cached)"])
    print(f"job 2 vs job 1, to the end of its epoch (medians): {miss / hit:.1f}x faster "
          f"(goal >= {GOAL:g}x: {miss / hit / GOAL:.1f}x the goal)")
    print(f"second run's start vs the first's (medians): {start_hit:.3f} s vs {start_miss:.3f} s "
          f"({start_miss / start_hit:.1f}x sooner: it does not wait for data)")
    print(f"cache: {cache.hits} hits, {cache.misses} misses, {cache.bytes_fetched >> 20} MiB fetched, "
          f"{cache.evictions} evictions, {cache.used_bytes >> 20} of {cache.capacity_bytes >> 20} MiB used")


if __name__ == "__main__":
    main()
