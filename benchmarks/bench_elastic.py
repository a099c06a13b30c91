"""Elastic jobs in the simulator (issue 34): Pollux's public workloads and Philly, each job
fixed at the size its trace asks and elastic, through the live scheduler's code.

    python benchmarks/bench_elastic.py [--workloads 1-8] [--load 1.0] [--tick 60] [--resize-cost 30]

Pollux's workloads (``sim/pollux.py``: 160 jobs each, Pollux's measured throughput curves) on
Pollux's cluster, 16 nodes of 4 GPUs, replayed three ways: today's default (fixed sizes),
Tiresias (fixed sizes, two-dimensional least attained service), and the default with every
job elastic up to its application's cap, growing into idle GPUs and shrinking for waiting
jobs: from the size it asked (it only grows beyond it), from half of it, or from 1 GPU (it may
start smaller and be shrunk below what it asked); the scheduler is told each job's throughput
curve (``PendingJob.speedup``). Printed per workload and as means: mean JCT, p99 queueing
delay, makespan;
and the published mean JCT of Pollux and Tiresias (Qiao et al., OSDI'21) with each run's
ratio to it. Pollux's simulator schedules every 60 s and stalls a job 30 s at every
(re)allocation: ``--tick`` and ``--resize-cost`` (the first start is not charged here).
"""

from __future__ import annotations

import argparse
import statistics
import time

from trainyard.sim import pollux
from trainyard.sim.jobs import uniform_cluster
from trainyard.sim.queue import QueueSim, policy_named
from trainyard.sim.queue_track import percentile


def run(jobs, policy: str, tick: float, resize_cost: float) -> dict[str, float]:
    nodes = uniform_cluster(pollux.CLUSTER_NODES, pollux.GPUS_PER_NODE)
    result = QueueSim(nodes, jobs, policy_named(policy), tick=tick, resize_cost=resize_cost).run()
    done = [o for o in result.outcomes.values() if o.end is not None]
    jct = [o.jct for o in done]
    return {
        "jobs": len(done),
        "never": len(result.never_started) + len(result.rejected),
        "mean_jct": statistics.fmean(jct),
        "p99_queueing": percentile([o.queueing for o in done], 99),
        "makespan": result.last_end - result.first_submit,
        "resizes": result.grows + result.shrinks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="1-8")
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--tick", type=float, default=60.0)
    parser.add_argument("--resize-cost", type=float, default=30.0)
    args = parser.parse_args()
    first, _, last = args.workloads.partition("-")
    numbers = range(int(first), int(last or first) + 1)
    modes = (("default, fixed", "default", False, "asked"), ("tiresias, fixed", "tiresias", False, "asked"),
             ("elastic, min asked", "default", True, "asked"), ("elastic, min half", "default", True, "half"),
             ("elastic, min 1", "default", True, "least"))
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, *_ in modes}
    print(f"{'workload':<10} {'mode':<18} {'jobs':>5} {'mean JCT s':>11} {'p99 queue s':>12} {'makespan s':>11} "
          f"{'resizes':>8} {'CPU s':>6}")
    for number in numbers:
        elastic_jobs = pollux.load_workload(number, args.load)
        for label, policy, elastic, low in modes:
            jobs = [pollux.as_trace_job(j, elastic, low) for j in elastic_jobs]
            began = time.process_time()
            row = run(jobs, policy, args.tick, args.resize_cost)
            rows[label].append(row)
            print(f"{number:<10} {label:<18} {row['jobs']:>5.0f} {row['mean_jct']:>11.0f} "
                  f"{row['p99_queueing']:>12.0f} "
                  f"{row['makespan']:>11.0f} {row['resizes']:>8.0f} {time.process_time() - began:>6.1f}", flush=True)
    published = {p: pollux.published_mean_jct(p, args.load) for p in ("pollux", "tiresias")}
    print(f"\nmeans over workloads {args.workloads} at load {args.load} "
          f"(published: Pollux {published['pollux']:.0f} s, Tiresias {published['tiresias']:.0f} s mean JCT)")
    for label, *_ in modes:
        mean = statistics.fmean(r["mean_jct"] for r in rows[label])
        print(f"{label:<18} mean JCT {mean:>7.0f} s (x{mean / published['pollux']:.2f} Pollux's, "
              f"x{mean / published['tiresias']:.2f} Tiresias's)  p99 queueing "
              f"{statistics.fmean(r['p99_queueing'] for r in rows[label]):>7.0f} s  makespan "
              f"{statistics.fmean(r['makespan'] for r in rows[label]):>7.0f} s")


if __name__ == "__main__":
    main()
