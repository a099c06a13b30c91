"""Simulator speed: one FGD-protocol placement run per policy, and a month of Philly.

Targets (issue 4), on one core:

* one placement run — openb default pod list, seed 42, tuned to 130 % (~10.8k pods on
  1,213 nodes) — under 10 s with best-fit and under 30 s with FGD (the FGD authors' Go
  simulator takes about 10 minutes per run on 2 cores);
* the October 2017 month of Philly (47,192 jobs) on 92 × 8 GPUs in under 60 s (CPU time
  of the process, which a shared machine does not inflate as it does wall time).

Prints times and ratios to the targets; never asserts.

    python benchmarks/bench_sim.py [--only placement,queue] [--queue-policies fifo,default]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.sim.jobs import load_philly, parse_time, uniform_cluster, window  # noqa: E402
from trainyard.sim.openb import gpu_capacity, load_nodes, load_pods, tune, workload_of  # noqa: E402
from trainyard.sim.placement import run_placement  # noqa: E402
from trainyard.sim.policies import scorer_name  # noqa: E402
from trainyard.sim.queue import QueueSim, policy_named  # noqa: E402
from trainyard.sim.traces import OPENB_NODES, PHILLY_JOBS, resolve, trace_file  # noqa: E402

PLACEMENT_TARGETS = {"bestfit": 10.0, "scorer:bestfit": 10.0, "fgd": 30.0, "default": None}
MONTH_TARGET = 60.0


def placement(policies: list[str]) -> dict[str, float]:
    nodes = load_nodes(trace_file(*OPENB_NODES))
    pods = load_pods(resolve("--pods", "openb"))
    tuned = tune(pods, gpu_capacity(nodes), 1.3, 42)
    workload = workload_of(pods)
    times = {}
    print(f"placement: openb default, seed 42, {len(tuned)} pods on {len(nodes)} nodes, to 130 % arrived")
    for policy in policies:
        started = time.perf_counter()
        run = run_placement(nodes, tuned, scorer_name(policy), workload, job_id_base=42 * 10_000_000)
        seconds = times[policy] = time.perf_counter() - started
        target = PLACEMENT_TARGETS.get(policy)
        verdict = "" if target is None else f"  target < {target:.0f} s  ratio {seconds / target:.2f}x  " + (
            "MEETS" if seconds < target else "MISSES")
        alloc = run.curve(run.allocated)[100]
        print(f"  {policy:<16} ({scorer_name(policy):<16}) {seconds:6.1f} s   {alloc:.2f} % at 100 %{verdict}")
    return times


def month(policies: list[str]) -> dict[str, float]:
    jobs = load_philly(trace_file(*PHILLY_JOBS))
    october = window(jobs, parse_time("2017-10-01"), parse_time("2017-11-01"))
    times = {}
    print(f"queue: Philly October 2017, {len(october)} jobs on 92 x 8 GPUs, 60 s scheduling tick")
    for policy in policies:
        started, cpu = time.perf_counter(), time.process_time()
        result = QueueSim(uniform_cluster(92, 8), october, policy_named(policy), tick=60.0).run()
        cpu = time.process_time() - cpu  # the machine may be shared: CPU seconds are the measure
        seconds = times[policy] = cpu
        print(f"  {policy:<10} {cpu:6.1f} s CPU ({time.perf_counter() - started:.1f} s wall, "
              f"{result.cycles} scheduling cycles, "
              f"{result.suspensions} suspensions)  target < {MONTH_TARGET:.0f} s  "
              f"ratio {seconds / MONTH_TARGET:.2f}x  {'MEETS' if seconds < MONTH_TARGET else 'MISSES'}")
    return times


def render_queue(folder: Path) -> None:
    """Markdown tables from ``yard sim queue --json`` outputs saved as ``*.json`` in ``folder``."""
    print("| run | policy | jobs | avg JCT | median JCT | p99 JCT | avg queueing | p99 queueing | makespan "
          "| GPU util. | preemptions | suspensions per job-hour | GPU-h lost to suspensions | sim time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    done = [p for p in sorted(folder.glob("*.json")) if p.stat().st_size]  # skip runs still writing
    for path in done:
        r = json.loads(path.read_text())
        print(f"| {path.stem} | {r['policy']} | {r['jobs']} | {r['avg_jct_h']:.2f} h | {r['median_jct_h']:.2f} h "
              f"| {r['p99_jct_h']:.1f} h | {r['avg_queueing_h']:.2f} h | {r['p99_queueing_h']:.2f} h "
              f"| {r['makespan_h']:.0f} h | {100 * r['gpu_utilisation']:.1f} % | {r['preemptions']} "
              f"| {r.get('suspensions_per_job_hour', 0.0):.4f} | {r.get('lost_gpu_hours', 0.0):.0f} "
              f"| {r['seconds']:.0f} s |")
    for path in done:
        r = json.loads(path.read_text())
        print(f"\n{path.stem} ({r['policy']}), mean queueing delay per VC (h): "
              + ", ".join(f"{vc} {q:.2f}" for vc, q in r["vc_avg_queueing_h"].items()))
        if "sharing" in r:
            print("\n| VC | quota (GPUs) | jobs | mean queueing shared | alone on its quota | worse for sharing |")
            print("|---|---|---|---|---|---|")
            for vc, row in r["sharing"].items():
                shared = row["shared_avg_queueing_h"]
                print(f"| {vc} | {row['quota_gpus']} | {row['jobs']} | "
                      f"{'-' if shared is None else f'{shared:.2f} h'} | {row['alone_avg_queueing_h']:.2f} h | "
                      f"{'yes' if row['worse_for_sharing'] else 'no'} |")


# Issue 16's goals for the default policy on Philly October 2017, 92 x 8: (mean JCT, p99 queueing), h.
TIMESHARE_GOALS = {"1.5x": (4.2, 2.0), "1.0x": (3.25, 0.5)}
POLICY_ORDER = ("fifo", "sjf", "tiresias", "easy", "default, all suspendable", "default, half suspendable")


def plot_queue(folder: Path, path: Path) -> None:
    """Mean JCT and p99 queueing per policy and load, from the ``yard sim queue --json``
    outputs in ``folder`` (those of the whole month of October 2017 on 92 x 8)."""
    from trainyard.sim.plots import plot_queue_policies

    rows = []
    for one in sorted(folder.glob("*.json")):
        r = json.loads(one.read_text()) if one.stat().st_size else None
        if r is None or r.get("sharing") or r["window"] != ["2017-10-01", "2017-11-01"] or r["cluster"] != "92x8":
            continue
        policy = r["policy"] if r["policy"] != "default" else f"default, {r['suspendable']} suspendable"
        rows.append((f"{r['load']:.1f}x", policy, r["avg_jct_h"], r["p99_queueing_h"]))
    rows.sort(key=lambda row: (-float(row[0][:-1]), POLICY_ORDER.index(row[1]) if row[1] in POLICY_ORDER else 99))
    plot_queue_policies(rows, TIMESHARE_GOALS, path, "Philly October 2017 on 92 x 8 GPUs")
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="placement,queue")
    parser.add_argument("--placement-policies", default="bestfit,scorer:bestfit,fgd,default")
    parser.add_argument("--queue-policies", default="fifo,default")
    parser.add_argument("--render-queue", type=Path, metavar="DIR",
                        help="only print markdown tables of the `yard sim queue --json` files in DIR")
    parser.add_argument("--plot-queue", nargs=2, type=Path, metavar=("DIR", "PNG"),
                        help="only draw mean JCT and p99 queueing per policy from the `yard sim queue --json` "
                        "files of the October month in DIR")
    args = parser.parse_args(argv)
    if args.render_queue:
        render_queue(args.render_queue)
        return {}
    if args.plot_queue:
        plot_queue(*args.plot_queue)
        return {}
    out: dict = {}
    parts = args.only.split(",")
    if "placement" in parts:
        out["placement"] = placement(args.placement_policies.split(","))
    if "queue" in parts:
        out["queue"] = month(args.queue_policies.split(","))
    return out


if __name__ == "__main__":
    main()
