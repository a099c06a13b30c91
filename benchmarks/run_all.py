"""Run every Trainyard benchmark and print a summary against the targets.

Measures (see each file's docstring):

* bench_submit_latency    submit→RUNNING p50 on the local backend     target < 0.2 s
* bench_submit_throughput API submits/s, 20 clients, SQLite and PG    target ≥ 300 jobs/s, p99 < 250 ms
* bench_list_jobs         one page via the CLI, 100k jobs in store    target < 0.5 s
                          ``yard --help``                              target < 0.3 s
* bench_sim               one openb placement run: best-fit / FGD       target < 10 s / < 30 s
                          Philly October 2017 through the scheduler    target < 60 s
* bench_metrics_exposition GET /metrics, 1,000 nodes x 8 GPUs, 10k jobs target < 100 ms

Defaults are sized for a small (2-core) machine and take a few minutes (most of it filling
/metrics' store with the hour of samples the retention keeps raw); ``--quick``
shrinks everything (fewer jobs, a 10k-job store, fewer runs) to a ~20 s smoke run whose
numbers are indicative only. Prints numbers and ratios; never asserts, always exits 0
unless a benchmark crashes.

Run:  python benchmarks/run_all.py [--quick] [--only latency,throughput,list]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_list_jobs  # noqa: E402
import bench_metrics_exposition  # noqa: E402
import bench_sim  # noqa: E402
import bench_submit_latency  # noqa: E402
import bench_submit_throughput  # noqa: E402

FULL = {
    "latency": ["-n", "50"],
    "throughput": ["-m", "10000"],
    "list": ["--jobs", "100000", "--runs", "10"],
    "sim": ["--placement-policies", "bestfit,fgd", "--queue-policies", "fifo"],
    "metrics": ["--runs", "10"],
}
QUICK = {
    "latency": ["-n", "10"],
    "throughput": ["-m", "1000", "--db", "sqlite"],
    "list": ["--jobs", "10000", "--runs", "3"],
    "sim": ["--only", "placement", "--placement-policies", "bestfit"],
    "metrics": ["--runs", "3", "--rounds", "1"],
}
BENCHES = {
    "latency": bench_submit_latency.main,
    "throughput": bench_submit_throughput.main,
    "list": bench_list_jobs.main,
    "sim": bench_sim.main,
    "metrics": bench_metrics_exposition.main,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not a measurement")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ",".join(BENCHES))
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    results: dict[str, dict] = {}
    crashed = []
    for name in [n.strip() for n in args.only.split(",") if n.strip()]:
        t0 = time.perf_counter()
        try:
            results[name] = BENCHES[name](sizes[name])
        except Exception:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            crashed.append(name)
        print(f"   ({name} took {time.perf_counter() - t0:.0f} s)\n")

    print("== summary" + (" (--quick: indicative only)" if args.quick else "") + " ==")
    rows = []
    if "latency" in results:
        r = results["latency"]
        rows.append(("submit→RUNNING p50", f"{r['p50_s'] * 1000:.0f} ms", "< 200 ms",
                     r["p50_s"] / 0.2, r["p50_s"] < 0.2))
    if "throughput" in results:
        r = results["throughput"]
        rows.append(("submit throughput (worst db)", f"{r['worst']:.0f} jobs/s", "≥ 300 jobs/s",
                     r["worst"] / 300, r["worst"] >= 300))
        rows.append(("submit p99 (worst db)", f"{r['worst_p99_s'] * 1000:.0f} ms", "< 250 ms",
                     r["worst_p99_s"] / 0.25, r["worst_p99_s"] < 0.25))
    if "list" in results:
        r = results["list"]
        rows.append(("one page via CLI (slowest)", f"{r['worst_list_p50_s'] * 1000:.0f} ms", "< 500 ms",
                     r["worst_list_p50_s"] / 0.5, r["worst_list_p50_s"] < 0.5))
        rows.append(("yard --help", f"{r['help_p50_s'] * 1000:.0f} ms", "< 300 ms", r["help_p50_s"] / 0.3,
                     r["help_p50_s"] < 0.3))
    if "sim" in results:
        r = results["sim"]
        for policy, target in (("bestfit", 10.0), ("fgd", 30.0)):
            if policy in r.get("placement", {}):
                seconds = r["placement"][policy]
                rows.append((f"sim placement run, {policy}", f"{seconds:.1f} s", f"< {target:.0f} s",
                             seconds / target, seconds < target))
        for policy, seconds in r.get("queue", {}).items():
            rows.append((f"sim Philly month, {policy}", f"{seconds:.1f} s", "< 60 s", seconds / 60, seconds < 60))
    if "metrics" in results:
        r = results["metrics"]
        rows.append(("GET /metrics p50", f"{r['p50_s'] * 1000:.0f} ms", "< 100 ms", r["p50_s"] / 0.1,
                     r["p50_s"] < 0.1))
    for label, value, target, ratio, ok in rows:
        print(f"  {label:<28} {value:>14}   target {target:<13} ratio {ratio:5.2f}x   {'MEETS' if ok else 'MISSES'}")
    if crashed:
        print(f"  crashed: {', '.join(crashed)}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
