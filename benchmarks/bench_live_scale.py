"""The live server at scale: Kueue's scheduler performance workload through a real ``yard up``
on simulated nodes (``--backend simulated``, a stand-in: nothing runs), issue 33.

Kueue's baseline (``test/performance/scheduler/configs/baseline/generator.yaml``): 5 cohorts
of 6 ClusterQueues, each with a nominal quota of 20 and a borrowing limit of 100, and per
queue 350 small workloads (request 1, 200 ms, one every 100 ms, priority 50), 100 medium
(5, 500 ms, every 500 ms, priority 100) and 50 large (20, 1 s, every 1.2 s, priority 200):
15,000 in all. Kueue's published figures for it: 351 s mean wall, mean time to admission
6.7 s / 76.8 s / 215 s (large / medium / small).

Trainyard's equivalent, as close as its model allows: 30 VCs guaranteed 20 GPUs each with a
borrowing limit of 100 GPUs (borrowing on; Trainyard has no cohorts: a VC borrows from any
VC's idle GPUs, not only its cohort's), a cluster of exactly their 600 GPUs (75 nodes of 8;
``--nodes`` for more), a request of N units as N GPUs (small: 1 task of 1 GPU; medium: 1 task
of 5; large: a gang of 5 tasks of 4 — not 4 of 5: a VC's 20 guaranteed GPUs are HiveD cells of
two whole nodes and 4 GPUs more, where 4 tasks of 5 never fit, so such a job runs only as
borrowed work (``scheduler/outside_cells.py``; it used to wait for ever, a finding of this
benchmark), while Kueue admits its large workloads in quota), priorities low / normal / prod,
each workload a job whose task "runs" its runtime on the simulated nodes. Every VC's three streams submit at
Kueue's intervals from their own threads (``--scale`` shrinks the counts for a quick run).

Prints the wall time from the first submit to the last job's end, the mean and p99 time to
admission (submitted → started) per class beside Kueue's, and what a class's wait is made
of (how long its jobs held their GPUs against their runtime: the end is seen at the next
cycle; how many were requeued), the scheduler cycle's mean and max from the server's
``/metrics`` and how often cycles came, the server's CPU (its own process: not the
scheduler's worker), and errors. Never asserts.

``--cycle-log`` puts the controller's line per cycle (its wall, its thread's CPU, the worker's
seconds, its wait for the store's writer, each step's seconds) and the transactions that held
the writer over 0.1 s in the server's log; ``--reasons`` samples the waiting mediums' and
larges' reasons during the run; ``live_scale_waits.py HOME`` reads a ``--keep``t home's store
for what each class's wait was made of.

    python benchmarks/bench_live_scale.py [--scale 0.1] [--nodes 75] [--keep] [--cycle-log] [--reasons]
        [--src /path/a/src /path/b/src] [--repeat 1] [--env TRAINYARD_NAME=VALUE ...]

``--src`` runs the server from each source tree in turn, ``--repeat`` times, alternating:
on a shared machine only such side-by-side pairs compare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections import defaultdict

import httpx
from common import percentile, process_cpu_seconds, yard_command, yard_server

VCS, QUOTA, BORROW_LIMIT = 30, 20, 100
# class: (count per VC, creation interval s, runtime s, priority, instances, GPUs per task)
CLASSES = {
    "small": (350, 0.1, 0.2, "low", 1, 1),
    "medium": (100, 0.5, 0.5, "normal", 1, 5),
    "large": (50, 1.2, 1.0, "prod", 5, 4),
}
KUEUE_ADMISSION = {"large": 6.7, "medium": 76.8, "small": 215.0}
KUEUE_WALL = 351.0
# Kueue's baseline ClusterQueues preempt ``withinClusterQueue: LowerPriority`` (a VC's priority
# preemption, Trainyard's default), ``reclaimWithinCohort: Any`` (reclaim, the default too) and
# ``borrowWithinCohort: LowerPriority``; Trainyard's nearest settings (docs/scheduling.md). A
# tree without them ignores them; ``--env NAME=never`` / ``=after-drain`` turns them off.
KUEUE_POLICIES = {"TRAINYARD_SCHEDULER_BORROW_WITHIN_VCS": "lower-priority",
                  "TRAINYARD_SCHEDULER_RESERVATION_HOLDS": "lower-priority"}
# ``yard up`` with the controller's per-cycle debug line on, and the store's long writes (--cycle-log).
CYCLE_LOG = ("import logging, sys; [logging.getLogger(name).setLevel(logging.DEBUG) for name in "
             "('trainyard.controller.loop', 'trainyard.store.db')]; "
             "from trainyard.cli.main import main; sys.exit(main())")


def job_file(kind: str, vc: str) -> str:
    _, _, runtime, priority, instances, gpus = CLASSES[kind]
    return json.dumps({
        "name": kind, "priority": priority, "defaults": {"virtualCluster": vc},
        "taskRoles": {"w": {"instances": instances,
                            "resourcePerInstance": {"gpu": gpus, "cpu": 0.1, "memoryMB": 64},
                            "env": {"TRAINYARD_SIMULATED_SECONDS": str(runtime)},
                            "commands": ["train"]}},
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of Kueue's counts (default all)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the jobs to end")
    parser.add_argument("--nodes", type=int, default=VCS * QUOTA // 8, help="8-GPU nodes (default: the quotas' 600)")
    parser.add_argument("--profile", metavar="FILE", help="run the server under py-spy, its samples (raw) to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the server's home (its log) and say where")
    parser.add_argument("--cycle-log", action="store_true",
                        help="per cycle: wall, CPU, writer wait, steps; and long writes: in the server's log")
    parser.add_argument("--reasons", action="store_true",
                        help="sample the waiting mediums' and larges' reasons every 2 s; print their counts")
    parser.add_argument("--src", nargs="+", default=[None],
                        help="source trees to run the server from, in turn (PYTHONPATH; default: the installed `yard`)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each source tree, alternating")
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="more settings for the server (e.g. TRAINYARD_SCHEDULER_...)")
    args = parser.parse_args()
    for _ in range(args.repeat):
        for src in args.src:
            one_run(args, src)


def one_run(args: argparse.Namespace, src: str | None) -> None:
    """One fresh server running the code under ``src`` (else the installed ``yard``), the
    workload through it, and the figures printed."""
    counts = {kind: max(1, round(spec[0] * args.scale)) for kind, spec in CLASSES.items()}
    total = sum(counts.values()) * VCS
    env = {"TRAINYARD_BACKEND": "simulated", "TRAINYARD_SIMULATED_NODES": str(args.nodes),
           "TRAINYARD_SIMULATED_GPUS_PER_NODE": "8", "TRAINYARD_SCHEDULER_BORROWING": "true",
           "TRAINYARD_MAX_WAITING_JOBS_PER_USER": str(total + 1000), "TRAINYARD_MONITOR_INTERVAL_SECONDS": "60",
           **KUEUE_POLICIES, **dict(item.split("=", 1) for item in args.env)}
    if src:
        env["PYTHONPATH"] = src
    print(f"== {src or 'installed yard'} ==", flush=True)
    spy = ["py-spy", "record", "--threads", "--rate", "50", "--format", "raw", "--output", args.profile, "--"]
    command = [*spy, *yard_command()] if args.profile else None
    if args.cycle_log:
        command = [*(spy if args.profile else []), sys.executable, "-c", CYCLE_LOG]
    with yard_server(local_gpus=None, env=env, startup_deadline_s=120, keep_home=args.keep,
                     command=command) as server:
        if args.keep:
            print(f"the server's home: {server.home}", flush=True)
        for i in range(VCS):
            server.client.create_vc(f"cq{i:02d}", gpus=QUOTA, borrow_limit=BORROW_LIMIT)
        cpu_before = process_cpu_seconds(server.process.pid)
        errors: list[str] = []
        started = time.monotonic()

        def stream(vc: str, kind: str) -> None:
            count, interval = counts[kind], CLASSES[kind][1]
            body = job_file(kind, vc)
            with httpx.Client(base_url=server.url + "/api/v1", headers={**server.headers,
                              "Content-Type": "application/json"}, timeout=60) as http:
                due = time.monotonic()
                for _ in range(count):
                    due += interval
                    try:
                        http.post("/jobs", content=body).raise_for_status()
                    except httpx.HTTPError as exc:
                        errors.append(f"{kind} in {vc}: {exc}")
                    time.sleep(max(0.0, due - time.monotonic()))

        reasons: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        done = threading.Event()

        def sample() -> None:  # what the waiting mediums and larges wait for, every 2 s
            while not done.wait(2.0):
                for kind in ("medium", "large"):
                    with contextlib.suppress(httpx.HTTPError):
                        for job in server.client.jobs(state="WAITING", name=kind, limit=200).items:
                            reasons[kind][job.pending.reason if job.pending else "-"] += 1

        threads = [threading.Thread(target=stream, args=(f"cq{i:02d}", kind)) for i in range(VCS) for kind in CLASSES]
        if args.reasons:
            threading.Thread(target=sample, daemon=True).start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        submitted = time.monotonic() - started
        print(f"submitted {total:,} jobs in {submitted:.0f} s ({len(errors)} errors); waiting for them to end",
              flush=True)
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:  # until every job has ended
            left = server.client.jobs(state="WAITING,RUNNING,STOPPING", limit=1).items
            if not left:
                break
            time.sleep(1.0)
        else:
            print(f"gave up after {args.timeout:.0f} s: job {left[0].id} is {left[0].state} "
                  f"({left[0].pending.message if left[0].pending else ''})", flush=True)
        wall = time.monotonic() - started
        done.set()
        cpu = process_cpu_seconds(server.process.pid) - cpu_before
        admission: dict[str, list[float]] = defaultdict(list)
        held: dict[str, list[float]] = defaultdict(list)  # started -> finished: GPUs held per job
        requeued: dict[str, int] = defaultdict(int)
        states: dict[str, int] = defaultdict(int)
        before = None
        while True:
            page = server.client.jobs(limit=500, before=before)
            for job in page.items:
                states[job.state] += 1
                if job.startedAt is not None:
                    admission[job.name].append((job.startedAt - job.submittedAt).total_seconds())
                    if job.finishedAt is not None:
                        held[job.name].append((job.finishedAt - job.startedAt).total_seconds())
                requeued[job.name] += job.attempt > 0
            if page.next is None:
                break
            before = page.next
        metrics = httpx.get(server.url + "/metrics", headers=server.headers, timeout=30).text
        cycles = {m.group(1): float(m.group(2)) for m in
                  re.finditer(r"^trainyard_scheduler_cycle_duration_seconds_(sum|count) (\S+)$", metrics, re.M)}
        buckets = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
            r'^trainyard_scheduler_cycle_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', metrics, re.M)]
    print(f"{total:,} jobs ({', '.join(f'{counts[k] * VCS:,} {k}' for k in CLASSES)}) over {VCS} VCs on "
          f"{args.nodes} simulated nodes x 8 GPUs; submitted in {submitted:.0f} s; {len(errors)} errors"
          + (f" (first: {errors[0]})" if errors else ""))
    print(f"wall, first submit to last end: {wall:.0f} s (Kueue: {KUEUE_WALL:.0f} s; ratio {wall / KUEUE_WALL:.2f}x); "
          f"states {dict(states)}")
    for kind in ("large", "medium", "small"):
        got = admission.get(kind, [])
        mean = sum(got) / len(got) if got else float("nan")
        print(f"time to admission, {kind}: mean {mean:.1f} s, p99 {percentile(got, 99):.1f} s over {len(got):,} "
              f"(Kueue: mean {KUEUE_ADMISSION[kind]:.1f} s; ratio {mean / KUEUE_ADMISSION[kind]:.2f}x)")
        # What a job's wait is made of: GPUs held past the runtime (its end seen at the next
        # cycle), jobs preempted and requeued.
        runs = held.get(kind, [])
        print(f"  {kind}: GPUs held started -> finished mean {sum(runs) / max(1, len(runs)):.2f} s for a runtime of "
              f"{CLASSES[kind][2]:.1f} s; requeued (attempt > 0) {requeued[kind]}")
    if cycles.get("count"):
        count = cycles["count"]
        p99 = next((le for le, seen in sorted(buckets) if seen >= 0.99 * count), float("inf"))
        print(f"scheduler cycles: {count:.0f}, mean {cycles['sum'] / count * 1000:.0f} ms, p99 <= {p99 * 1000:.0f} ms "
              f"(the histogram's bucket); one every {wall / count:.2f} s over the wall")
    else:
        print("scheduler cycles: none in /metrics")
    for kind, seen in reasons.items():
        print(f"waiting {kind}s' reasons, sampled every 2 s (up to 200 a sample): {dict(seen)}")
    print(f"server CPU {cpu:.0f} s ({cpu / wall:.0%} of one core over the wall)")


if __name__ == "__main__":
    main()
