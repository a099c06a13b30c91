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

Targets (issue 33): under 0.25 s at 1,000 x 10,000 and under 3 s at 10,000 x 100,000
(``GOALS``; other sizes: no goal). Each size also prints the time per phase of the cycle
(``schedule(snapshot, phases)``: prepare, guaranteed, preempt, borrow, opportunistic,
explain), for the cost model in docs/benchmarks.md. Prints; never asserts.

``--max-starts N`` bounds the measured cycle to N jobs started (``SchedulerConfig.max_starts``,
``yard up``'s ``scheduler_max_starts_per_cycle``): it stops there and leaves the rest to the
next cycle. Without ``--against`` the run then checks that its starts are the first starts
of an unbounded cycle on the same snapshot (one more cycle, not timed).

``--moves-per-hour N`` turns consolidation on (``SchedulerConfig.moves_per_hour``) in this
checkout's cycles only: with ``--against``, its cost where nothing is fragmented (no running
job of the synthetic cluster is suspendable, so nothing may move and decisions stay equal).

``--against DIR`` runs the same sizes on another checkout's scheduler (``DIR/src``, e.g. a
worktree of main) in a subprocess, the two taking their cycles in turns (old, new, old,
...) so that both see the same load on a shared machine; prints its times beside these
(wall and CPU), and checks that both made the same decisions on the same snapshot: every
start with its nodes and devices, every preemption, every waiting job's reason, message,
position and ETA. ``--src DIR`` runs another checkout's scheduler in this process.

    python benchmarks/bench_scheduler.py [--sizes 1000:10000 10000:100000] [--scorer fgd] [--runs 3] [--selectors 0.2]
        [--against ../main] [--max-starts 500]

The scorer defaults to the scheduler's default (``SchedulerConfig().scorer``).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _source() -> Path:
    """The checkout whose scheduler runs: ``--src DIR``, else this one."""
    for i, arg in enumerate(sys.argv):
        if arg == "--src" and i + 1 < len(sys.argv):
            return Path(sys.argv[i + 1]).resolve()
        if arg.startswith("--src="):
            return Path(arg.split("=", 1)[1]).resolve()
    return REPO


SOURCE = _source()
sys.path.insert(0, str(SOURCE / "src"))  # run from a checkout even when not installed

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
GOALS = {(1000, 10000): 0.25, (10000, 100000): 3.0}  # issue 33: seconds per cycle
PHASES = ("prepare", "guaranteed", "preempt", "borrow", "opportunistic", "explain")
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


def snapshot_for(nodes_count: int, pending_count: int, scorer: str, selectors: float = 0.0, max_starts: int = 0):
    rng = random.Random(nodes_count * 7 + pending_count)
    config = SchedulerConfig(scorer=scorer)
    nodes = cluster(nodes_count)
    quotas = vcs(nodes_count)
    busy, running, utilisation = half_busy(nodes, quotas, rng, config)  # unbounded: the same cluster either way
    pending = jobs(pending_count, 10_000_000, rng, 100.0, selectors)
    if max_starts:  # only a checkout that has the bound is asked for it
        config = SchedulerConfig(scorer=scorer, max_starts=max_starts)
    return Snapshot(busy, pending, now=100.0, vcs=quotas, running=running, config=config), utilisation


def decision_lines(decisions) -> list[str]:
    """Every decision, one line each, in a fixed order: what two schedulers are compared on."""
    return (
        [repr(s) for s in decisions.starts]
        + [repr(p) for p in decisions.preemptions]
        + [repr(w) for w in sorted(decisions.waits, key=lambda w: w.job_id)]
    )


class Measured:
    """One size's snapshot, cycles run on it one at a time (``cycle``), and what they gave."""

    def __init__(self, nodes_count: int, pending_count: int, scorer: str, selectors: float = 0.0,
                 max_starts: int = 0, moves_per_hour: int = 0) -> None:
        self.snapshot, self.utilisation = snapshot_for(nodes_count, pending_count, scorer, selectors, max_starts)
        if moves_per_hour:  # consolidation on: only this checkout is asked for it (``--moves-per-hour``)
            self.snapshot = replace(self.snapshot, config=replace(self.snapshot.config, moves_per_hour=moves_per_hour))
        self.timed = "phases" in inspect.signature(schedule).parameters  # an older checkout may not time phases
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.phases: dict[str, float] = {}
        self.decisions = None

    def cycle(self) -> float:
        phases: dict[str, float] = {}
        started, cpu_started = time.perf_counter(), time.process_time()
        self.decisions = schedule(self.snapshot, phases) if self.timed else schedule(self.snapshot)
        self.times.append(time.perf_counter() - started)
        self.cpu.append(time.process_time() - cpu_started)
        if self.times[-1] == min(self.times):
            self.phases = phases
        return self.times[-1]

    def result(self) -> dict:
        """The cycles' times, the best one's phases, and the decisions."""
        decisions = self.decisions
        assert decisions is not None
        tasks = sum(len(s.placements) for s in decisions.starts)
        reasons: dict[str, int] = defaultdict(int)
        for wait in decisions.waits:
            reasons[str(wait.reason)] += 1
        lines = decision_lines(decisions)
        snapshot = self.snapshot
        return {
            "times": self.times, "cpu": self.cpu, "phases": self.phases, "utilisation": self.utilisation,
            "running": len(snapshot.running), "starts": len(decisions.starts), "tasks": tasks,
            "preemptions": len(decisions.preemptions), "reasons": dict(sorted(reasons.items())), "lines": lines,
            "snapshot": hashlib.sha256(repr((snapshot.nodes, snapshot.running)).encode()).hexdigest(),
            "digest": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
        }


def serve(args: argparse.Namespace) -> None:
    """For ``--against``: build the one size's snapshot, then run a cycle per line "cycle"
    read, printing its time, until "end": then print the result (one JSON line each)."""
    nodes_count, pending_count = (int(x) for x in args.sizes[0].split(":"))
    measured = Measured(nodes_count, pending_count, args.scorer, args.selectors, args.max_starts)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "cycle":
            print(json.dumps(measured.cycle()), flush=True)
        else:
            print(json.dumps(measured.result()), flush=True)
            return


def report(size: str, result: dict, runs: int, scorer: str, selectors: float, label: str = "") -> float:
    nodes_count, pending_count = (int(x) for x in size.split(":"))
    best = min(result["times"])
    with_selectors = f" ({selectors:.0%} with a selector)" if selectors else ""
    goal = GOALS.get((nodes_count, pending_count))
    verdict = "met" if goal and best < goal else "MISSED"
    against_goal = f"; goal < {goal:g} s: x{best / goal:.2f} of it, {verdict}" if goal else ""
    print(
        f"{label}{nodes_count:>6} nodes x 8 GPU ({result['utilisation']:.0%} busy, {result['running']} running), "
        f"{pending_count:>6} pending{with_selectors}, scorer {scorer}: cycle {best:.3f} s (best of {runs}; "
        f"all {', '.join(f'{t:.3f}' for t in result['times'])}; CPU {min(result['cpu']):.3f} s){against_goal}; "
        f"{result['starts']} jobs / "
        f"{result['tasks']} tasks started, {result['tasks'] / best:,.0f} placements/s; "
        f"{result['preemptions']} preemptions; waiting: {result['reasons']}"
    )
    if result["phases"]:
        total = sum(result["phases"].values())
        split = ", ".join(f"{p} {result['phases'].get(p, 0.0):.3f} s ({result['phases'].get(p, 0.0) / total:.0%})"
                          for p in PHASES)
        print(f"{' ' * len(label)}  phases (best run): {split}")
    return best


def side_by_side(other: Path, size: str, args: argparse.Namespace) -> tuple[dict, dict]:
    """One size on another checkout's scheduler (in a subprocess) and on this one, their
    cycles taken in turns (old, new, old, ...) so that both see the same load."""
    nodes_count, pending_count = (int(x) for x in size.split(":"))
    command = [sys.executable, __file__, "--src", str(other), "--serve", "--scorer", args.scorer,
               "--selectors", str(args.selectors), "--sizes", size]
    if args.max_starts:
        command += ["--max-starts", str(args.max_starts)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as worker:
        assert worker.stdin is not None and worker.stdout is not None
        measured = Measured(nodes_count, pending_count, args.scorer, args.selectors, args.max_starts,
                            args.moves_per_hour)
        while worker.stdout.readline().strip() != "ready":
            pass
        for _ in range(args.runs):
            worker.stdin.write("cycle\n")
            worker.stdin.flush()
            json.loads(worker.stdout.readline())
            measured.cycle()
        worker.stdin.write("end\n")
        worker.stdin.flush()
        old = json.loads(worker.stdout.readline())
    return old, measured.result()


# Fields of decisions an older checkout may lack, at the default it means: left out of a line
# before comparing (``Preempt.move``, consolidation's, issue 36).
NEW_DEFAULTS = (", move=False",)


def compare(size: str, old: dict, new: dict) -> bool:
    if old["digest"] != new["digest"] and len(old["lines"]) == len(new["lines"]):
        lines = []
        for line in new["lines"]:
            for field in NEW_DEFAULTS:
                line = line.replace(field, "")
            lines.append(line)
        if lines == old["lines"]:
            new = {**new, "lines": lines, "digest": old["digest"]}
    if old["snapshot"] != new["snapshot"]:
        print(f"  {size}: the two checkouts built different snapshots (their first cycles differ)")
        return False
    if old["digest"] == new["digest"]:
        print(f"  {size}: same decisions ({len(new['lines'])} lines: starts with nodes and devices, preemptions, "
              f"waits with reason, message, position, ETA)")
        return True
    differ = [(a, b) for a, b in zip(old["lines"], new["lines"], strict=False) if a != b]
    print(f"  {size}: DIFFERENT decisions: {len(old['lines'])} vs {len(new['lines'])} lines, {len(differ)} differ")
    for a, b in differ[:3]:
        print(f"    old: {a}\n    new: {b}")
    return False


def first_starts(measured: Measured) -> bool:
    """Whether the bounded cycle's starts are the first starts of an unbounded cycle on the
    same snapshot (the bound's promise: it changes when jobs start, not which start first)."""
    assert measured.decisions is not None
    bounded = [repr(s) for s in measured.decisions.starts]
    snapshot = measured.snapshot
    unbounded = schedule(replace(snapshot, config=replace(snapshot.config, max_starts=0)))
    same = bounded == [repr(s) for s in unbounded.starts[: len(bounded)]]
    left = "; it stopped at the bound (more=True)" if measured.decisions.more else ""
    print(f"  bounded to {snapshot.config.max_starts} starts: {len(bounded)} of the unbounded cycle's "
          f"{len(unbounded.starts)}, " + ("its first ones, the same" if same else "NOT its first ones") + left)
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1000:10000", "10000:100000"], help="NODES:PENDING ...")
    parser.add_argument("--scorer", default=SchedulerConfig().scorer, help="default: the scheduler's default")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--selectors", type=float, default=0.0, help="fraction of pending jobs with a selector")
    parser.add_argument("--against", type=Path, help="another checkout to time and compare decisions with")
    parser.add_argument("--max-starts", type=int, default=0, help="bound the cycle to N jobs started (0: none)")
    parser.add_argument("--src", type=Path, help="run this checkout's scheduler (DIR/src)")
    parser.add_argument("--moves-per-hour", type=int, default=0,
                        help="consolidation on, with this budget, in this checkout's cycles only (not --against's)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the other side of --against
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    if args.src is not None:
        print(f"scheduler from {SOURCE / 'src'}")
    same = True
    bests: list[tuple[float, float | None]] = []  # (this checkout's, the other's) best per size
    for size in args.sizes:
        nodes_count, pending_count = (int(x) for x in size.split(":"))
        if args.against:
            old, new = side_by_side(args.against.resolve(), size, args)
            report(size, old, args.runs, args.scorer, args.selectors, label="old: ")
            best = report(size, new, args.runs, args.scorer, args.selectors, label="new: ")
            cpu = min(new["cpu"]) / min(old["cpu"])
            print(f"  {size}: new/old x{best / min(old['times']):.2f} (CPU time x{cpu:.2f}), cycles taken in turns")
            same = compare(size, old, new) and same
            bests.append((best, min(old["times"])))
        else:
            measured = Measured(nodes_count, pending_count, args.scorer, args.selectors, args.max_starts,
                                args.moves_per_hour)
            for _ in range(args.runs):
                measured.cycle()
            bests.append((report(size, measured.result(), args.runs, args.scorer, args.selectors), None))
            if args.max_starts:
                same = first_starts(measured) and same
    for size, (best, old_best) in zip(args.sizes[1:], bests[1:], strict=True):
        growth = f"growth {args.sizes[0]} -> {size}: x{best / bests[0][0]:.1f}"
        first_old = bests[0][1]
        if old_best is not None and first_old is not None:
            growth += f" (the other checkout: x{old_best / first_old:.1f})"
        print(growth)
    if args.max_starts and not args.against and not same:
        print("decisions: the bounded cycle's starts are NOT the unbounded one's first (above)")
    if args.against:
        print("decisions: " + ("the same as the other checkout's at every size" if same else "DIFFERENT (above)"))


if __name__ == "__main__":
    main()
