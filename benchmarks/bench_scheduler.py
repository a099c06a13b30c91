"""One ``schedule()`` cycle on a large synthetic cluster: cycle time and placements per second.

Sizes: 1,000 nodes x 8 GPUs with 10,000 pending jobs, then 10,000 nodes with 100,000
pending jobs (``--sizes`` to change). The cluster is half busy before the measured cycle:
a first cycle places enough of a similar mix to fill about half the GPUs, and those become
the running jobs (70 % with an expected end). Four VCs hold 88 % of the GPUs as quota;
a fifth of the jobs are opportunistic. The pending mix: mostly 1-GPU tasks, some 2/4/8,
some fractional (0.25/0.5), a few multi-node gangs (2-4 x 8 GPUs).

``--selectors F`` gives that fraction of the pending jobs a resource expression (one of
``SELECTORS``; half the racks are labelled ``ib=true``): what expressions cost a cycle. The
first of the runs evaluates them on each kind of node; later runs find the answers cached,
as the live controller's later cycles do.

Targets (issue 3): under 1 s for the first size; growth no worse than linear in pending
jobs (10x jobs and 10x nodes: about 10-20x). Prints; never asserts.

    python benchmarks/bench_scheduler.py [--sizes 1000:10000 10000:100000] [--scorer fgd] [--runs 3] [--selectors 0.2]

The scorer defaults to the scheduler's default (``SchedulerConfig().scorer``).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.scheduler.schedule import schedule  # noqa: E402
from trainyard.scheduler.snapshot import (  # noqa: E402
    GpuSlot,
    NodeState,
    PendingJob,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
    VirtualCluster,
)

VCS = ("vision", "nlp", "speech", "research")
VC_SHARE = (0.32, 0.32, 0.12, 0.12)  # of all GPUs, rounded down to whole nodes
TARGET_SECONDS = 1.0
SELECTORS = (
    'node.labels["ib"] == "true"',
    'gpu.memoryMB >= 40000 && gpu.model in ["A100", "H100"]',
    "node.cpu >= 64.0 && gpu.memoryMB > 40000",
    'node.labels["rack"] != "rack-000"',
)


def cluster(nodes: int) -> tuple[NodeState, ...]:
    return tuple(
        NodeState(
            f"node-{i:05d}",
            cpu_milli=96_000,
            memory_mb=1_024_000,
            gpus=tuple(GpuSlot(g, "A100", 81_920, group=str(g // 4)) for g in range(8)),
            labels={"rack": f"rack-{i // 32:03d}", "ib": "true" if i // 32 % 2 else "false"},
        )
        for i in range(nodes)
    )


def vcs(nodes: int) -> tuple[VirtualCluster, ...]:
    shares = zip(VCS, VC_SHARE, strict=True)
    return tuple(VirtualCluster(name, {"A100": int(nodes * share) * 8}) for name, share in shares)


def jobs(count: int, first_id: int, rng: random.Random, at: float, selectors: float = 0.0) -> tuple[PendingJob, ...]:
    result = []
    chooser = random.Random(first_id)  # apart from ``rng``: the same mix of jobs with or without selectors
    for j in range(count):
        roll = rng.random()
        if roll < 0.50:
            shape = [1000]
        elif roll < 0.65:
            shape = [rng.choice((250, 500))]
        elif roll < 0.77:
            shape = [2000]
        elif roll < 0.87:
            shape = [4000]
        elif roll < 0.95:
            shape = [8000]
        else:
            shape = [8000] * rng.choice((2, 3, 4))
        rank = rng.choices((0, 1, 2, 3), weights=(2, 4, 2, 2))[0]
        selector = chooser.choice(SELECTORS) if chooser.random() < selectors else ""
        tasks = tuple(
            TaskRequest("worker", i, g, cpu_milli=max(1000, g * 8), memory_mb=max(4096, g * 32), selector=selector)
            for i, g in enumerate(shape)
        )
        result.append(
            PendingJob(
                job_id=first_id + j,
                priority_rank=rank,
                submitted_at=at + j * 0.01,
                tasks=tasks,
                user=f"user{rng.randrange(50)}",
                vc=rng.choice(VCS),
                max_runtime=rng.choice((None, 600.0, 3600.0, 86400.0)),
            )
        )
    return tuple(result)


def half_busy(nodes: tuple[NodeState, ...], quotas, rng: random.Random, config: SchedulerConfig):
    """Fill about half the GPUs by scheduling a first batch; return nodes and running jobs."""
    capacity = len(nodes) * 8
    first = jobs(int(capacity * 0.5 / 3.0), 1, rng, 0.0)  # ~3 GPUs per job on average
    decisions = schedule(Snapshot(nodes, first, now=0.0, vcs=quotas, config=config))
    by_id = {j.job_id: j for j in first}
    used_gpu: dict[tuple[str, int], int] = defaultdict(int)
    used_cpu: dict[str, int] = defaultdict(int)
    used_mem: dict[str, int] = defaultdict(int)
    running = []
    for start in decisions.starts:
        job = by_id[start.job_id]
        for p in start.placements:
            used_cpu[p.node] += p.cpu_milli
            used_mem[p.node] += p.memory_mb
            for share in p.gpus:
                used_gpu[(p.node, share.index)] += share.milli
        end = rng.uniform(60, 7200) if rng.random() < 0.7 else None
        running.append(RunningJob(job.job_id, job.vc, job.user, job.priority_rank, start.placements, 0.0, end))
    busy = tuple(
        NodeState(
            n.name,
            n.cpu_milli,
            n.memory_mb,
            tuple(GpuSlot(g.index, g.model, g.memory_mb, used_gpu[(n.name, g.index)], g.group) for g in n.gpus),
            cpu_used_milli=used_cpu[n.name],
            memory_used_mb=used_mem[n.name],
            labels=n.labels,
        )
        for n in nodes
    )
    return busy, tuple(running), sum(used_gpu.values()) / (capacity * 1000)


def measure(nodes_count: int, pending_count: int, scorer: str, runs: int, selectors: float = 0.0) -> float:
    rng = random.Random(nodes_count * 7 + pending_count)
    config = SchedulerConfig(scorer=scorer)
    nodes = cluster(nodes_count)
    quotas = vcs(nodes_count)
    busy, running, utilisation = half_busy(nodes, quotas, rng, config)
    pending = jobs(pending_count, 10_000_000, rng, 100.0, selectors)
    snapshot = Snapshot(busy, pending, now=100.0, vcs=quotas, running=running, config=config)
    times = []
    decisions = None
    for _ in range(runs):
        started = time.perf_counter()
        decisions = schedule(snapshot)
        times.append(time.perf_counter() - started)
    assert decisions is not None
    best = min(times)
    tasks = sum(len(s.placements) for s in decisions.starts)
    reasons: dict[str, int] = defaultdict(int)
    for wait in decisions.waits:
        reasons[str(wait.reason)] += 1
    with_selectors = f" ({selectors:.0%} with a selector)" if selectors else ""
    print(
        f"{nodes_count:>6} nodes x 8 GPU ({utilisation:.0%} busy, {len(running)} running), "
        f"{pending_count:>6} pending{with_selectors}, scorer {scorer}: cycle {best:.3f} s (best of {runs}; "
        f"all {', '.join(f'{t:.3f}' for t in times)}); {len(decisions.starts)} jobs / {tasks} tasks started, "
        f"{tasks / best:,.0f} placements/s; {len(decisions.preemptions)} preemptions; "
        f"waiting: {dict(sorted(reasons.items()))}"
    )
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1000:10000", "10000:100000"], help="NODES:PENDING ...")
    parser.add_argument("--scorer", default=SchedulerConfig().scorer, help="default: the scheduler's default")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--selectors", type=float, default=0.0, help="fraction of pending jobs with a selector")
    args = parser.parse_args()
    results = []
    for size in args.sizes:
        nodes_count, pending_count = (int(x) for x in size.split(":"))
        results.append(measure(nodes_count, pending_count, args.scorer, args.runs, args.selectors))
    first = results[0]
    verdict = "meets" if first < TARGET_SECONDS else "MISSES"
    print(f"first size: {first:.3f} s, target < {TARGET_SECONDS:.0f} s: {verdict}")
    for size, seconds in zip(args.sizes[1:], results[1:], strict=True):
        print(f"growth {args.sizes[0]} -> {size}: x{seconds / first:.1f} (target: about x10-20 for 10x nodes and jobs)")


if __name__ == "__main__":
    main()
