"""The queueing track's report: JCT, queueing delay, makespan, utilisation, preemptions, per VC.

With VC quotas (Philly's nodes per VC scaled to the cluster, or each VC's share of the
demand) it also shows HiveD's *sharing
anomaly* test (Zhao et al., OSDI'20): each VC's mean queueing delay in the shared cluster
against what it sees alone on a private cluster of its quota's size. A VC should never be
worse off for sharing.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainyard.scheduler.snapshot import NodeState, VirtualCluster
from trainyard.sim.datasets import GB, DataCaches, DatasetModel, DataTally
from trainyard.sim.defaults import RESIZE_COST
from trainyard.sim.elastic import linear
from trainyard.sim.jobs import (
    TraceJob,
    load_history,
    load_openb_jobs,
    load_philly,
    load_vc_nodes,
    parse_cluster,
    parse_time,
    uniform_cluster,
    window,
)
from trainyard.sim.queue import Outcome, QueuePolicy, QueueResult, QueueSim, policy_named, vc_quotas, vc_settings
from trainyard.sim.traces import PHILLY_JOBS, resolve, trace_file

HOUR = 3600.0
DEFAULT_TICK = 60.0  # seconds between scheduling cycles (the controller's tick)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def report(result: QueueResult) -> dict[str, Any]:
    done = [o for o in result.outcomes.values() if o.end is not None]
    jct = [o.jct for o in done]
    queueing = [o.queueing for o in done]
    makespan = result.last_end - result.first_submit
    job_hours = sum(o.job.duration for o in done) / HOUR
    per_vc: dict[str, list[float]] = {}
    for o in done:
        per_vc.setdefault(o.job.vc, []).append(o.queueing)
    return {
        "policy": result.policy,
        "gpus": result.gpus,
        "jobs": len(done),
        "rejected": len(result.rejected),
        "never_started": len(result.never_started),
        "avg_jct_h": statistics.fmean(jct) / HOUR if jct else 0.0,
        "median_jct_h": statistics.median(jct) / HOUR if jct else 0.0,
        "p99_jct_h": percentile(jct, 99) / HOUR,
        "avg_queueing_h": statistics.fmean(queueing) / HOUR if queueing else 0.0,
        "p99_queueing_h": percentile(queueing, 99) / HOUR,
        "makespan_h": makespan / HOUR,
        "gpu_utilisation": result.busy_gpu_seconds / (result.gpus * makespan) if makespan > 0 else 0.0,
        "preemptions": result.preemptions,
        "suspensions": result.suspensions,
        # per hour of the jobs' own run time (their durations), and the GPU time they cost
        "suspensions_per_job_hour": result.suspensions / job_hours if job_hours else 0.0,
        "lost_gpu_hours": result.lost_gpu_seconds / HOUR,
        "lost_share_of_busy": result.lost_gpu_seconds / result.busy_gpu_seconds if result.busy_gpu_seconds else 0.0,
        "cycles": result.cycles,
        # consolidation: moves, and the GPU time their checkpoints cost (part of lost_gpu_hours)
        "moves": result.moves,
        "move_lost_gpu_hours": result.move_lost_gpu_seconds / HOUR,
        # jobs of LARGE_JOB_GPUS or more (a whole node of 8 or more): what consolidation is for
        **large_jobs(done),
        "vc_avg_queueing_h": {vc: statistics.fmean(q) / HOUR for vc, q in sorted(per_vc.items())},
        # borrowing: jobs that ran borrowed at least once, and those of them reclaimed
        "borrowed_jobs": sum(1 for o in done if o.borrowed_starts),
        "borrowed_starts": result.borrowed_starts,
        "reclaimed_jobs": sum(1 for o in done if o.reclaims),
        "reclaims": result.reclaims,
        "reclaim_suspensions": result.reclaim_suspensions,
        "borrowed_gpu_hours": sum(result.vc_borrowed_gpu_seconds.values()) / HOUR,
        "vcs": vc_report(result, done, makespan),
        **({} if result.data is None else {"data": data_report(result.data)}),
    }


def data_report(tally: DataTally) -> dict[str, Any]:
    """What the nodes' dataset caches did (``sim.datasets``): per start on a node, a hit or
    a miss; the bytes fetched; each start's wait for its data."""
    starts = tally.hits + tally.misses
    return {
        "hits": tally.hits, "misses": tally.misses, "hit_rate": tally.hits / starts if starts else 0.0,
        "fetched_tb": tally.bytes_fetched / (1000 * GB), "evictions": tally.evictions,
        "avg_fetch_wait_s": statistics.fmean(tally.fetches) if tally.fetches else 0.0,
        "p99_fetch_wait_s": percentile(tally.fetches, 99),
        "fetch_gpu_hours": tally.fetch_gpu_seconds / HOUR,
        "preferred_starts": tally.preferred,
    }


def dataset_model(args: argparse.Namespace) -> DatasetModel | None:
    """``--datasets`` and its options as a model (None without it); ValueError naming an option."""
    if getattr(args, "datasets", None) is None:
        return None
    low, sep, high = args.dataset_gb.partition(":")
    try:
        sizes = (float(low), float(high if sep else low))
    except ValueError:
        raise ValueError(f"--dataset-gb: {args.dataset_gb!r} is not MIN:MAX in GB (e.g. 1:100)") from None
    return DatasetModel(args.datasets, args.dataset_skew, *sizes, cache_gb=args.cache_gb, fetch_gbps=args.fetch_gbps,
                        prefer=args.data_placement == "on", ahead=args.data_ahead)


LARGE_JOB_GPUS = 8


def large_jobs(done: Sequence[Outcome]) -> dict[str, Any]:
    """Queueing of the jobs of ``LARGE_JOB_GPUS`` or more: their count, mean and p99."""
    queueing = [o.queueing for o in done if o.job.gpus >= LARGE_JOB_GPUS]
    return {
        "large_jobs": len(queueing),
        "large_avg_queueing_h": statistics.fmean(queueing) / HOUR if queueing else 0.0,
        "large_p99_queueing_h": percentile(queueing, 99) / HOUR,
    }


def vc_report(result: QueueResult, done: Sequence[Outcome], makespan: float) -> dict[str, dict[str, Any]]:
    """Per VC of the trace: mean JCT and queueing, p99 queueing, the GPUs its work held and
    borrowed on average over the makespan, its jobs that ran borrowed and were reclaimed."""
    by_vc: dict[str, list[Outcome]] = {}
    for o in done:
        by_vc.setdefault(o.job.vc, []).append(o)
    out = {}
    for vc, outcomes in sorted(by_vc.items()):
        queueing = [o.queueing for o in outcomes]
        out[vc] = {
            "jobs": len(outcomes),
            "avg_jct_h": statistics.fmean(o.jct for o in outcomes) / HOUR,
            "avg_queueing_h": statistics.fmean(queueing) / HOUR,
            "p99_queueing_h": percentile(queueing, 99) / HOUR,
            "mean_gpus": result.vc_gpu_seconds.get(vc, 0.0) / makespan if makespan > 0 else 0.0,
            "mean_borrowed_gpus": result.vc_borrowed_gpu_seconds.get(vc, 0.0) / makespan if makespan > 0 else 0.0,
            "borrowed_jobs": sum(1 for o in outcomes if o.borrowed_starts),
            "reclaimed_jobs": sum(1 for o in outcomes if o.reclaims),
        }
    return out


def private_cluster(gpus: int, node_gpus: int = 8) -> tuple[NodeState, ...]:
    """A VC's share as its own cluster: whole nodes of ``node_gpus``, plus one smaller node."""
    full, rest = divmod(gpus, node_gpus)
    nodes = uniform_cluster(full, node_gpus)
    if rest:
        nodes += tuple(n.__class__(f"r{i}", n.cpu_milli, n.memory_mb, n.gpus) for i, n in
                       enumerate(uniform_cluster(1, rest)))
    return nodes


def sharing_anomaly(jobs: Sequence[TraceJob], vcs: Sequence[VirtualCluster], shared: dict[str, Any],
                    policy: QueuePolicy, tick: float, on_fraction: Callable[[float], None] | None = None,
                    **sim_options: Any) -> dict[str, dict[str, Any]]:
    """Per VC: mean queueing delay shared (from ``shared``) and alone on its quota (the same
    policy and ``QueueSim`` options); ``on_fraction`` hears how much of it is done (0 to 1)."""
    out = {}
    for done, vc in enumerate(vcs):
        quota = sum(vc.quota.values())
        own = [j for j in jobs if j.vc == vc.name and j.gpus <= quota]
        if not own:
            continue

        def vc_fraction(fraction: float, done: int = done) -> None:
            if on_fraction is not None:
                on_fraction((done + fraction) / len(vcs))

        sim = QueueSim(private_cluster(quota), own, policy, tick=tick, **sim_options)
        alone = report(sim.run(None if on_fraction is None else vc_fraction))
        together = shared["vc_avg_queueing_h"].get(vc.name)
        out[vc.name] = {
            "quota_gpus": quota,
            "jobs": len(own),
            "shared_avg_queueing_h": together,
            "alone_avg_queueing_h": alone["avg_queueing_h"],
            "alone_avg_jct_h": alone["avg_jct_h"],
            "alone_p99_queueing_h": alone["p99_queueing_h"],
            # Worse by more than 1 % and 36 s: below that it is rounding and tick noise.
            "worse_for_sharing": together is not None and together > alone["avg_queueing_h"] * 1.01 + 0.01,
        }
    return out


def run_queue_command(args: argparse.Namespace,
                      on_fraction: Callable[[str, float], None] | None = None) -> dict[str, Any]:
    """``yard sim queue``'s run: the report (``print_report`` renders it), after writing the
    per-job CSV if ``--out``; ``on_fraction(phase, fraction)`` hears how far each phase is."""

    def phase(name: str) -> Callable[[float], None] | None:
        if on_fraction is None:
            return None
        report_to = on_fraction
        return lambda fraction: report_to(name, fraction)

    # The options first, before minutes of loading and replaying a trace.
    per_vc = {option: parse_per_vc(option, getattr(args, attr), kind) for option, attr, kind in (
        ("--vc-weights", "vc_weights", float), ("--borrow-limit", "borrow_limit", int),
        ("--lend-limit", "lend_limit", int))}
    if any(per_vc.values()) and not args.vc_quotas:
        raise ValueError("--vc-weights, --borrow-limit and --lend-limit need --vc-quotas (VCs to set them on)")
    borrowing = None if args.borrowing is None else args.borrowing == "on"
    data_model = dataset_model(args)
    policy = policy_named(args.policy, args.time_slice, borrowing, args.fair_share_half_life,
                          getattr(args, "max_starts", None), getattr(args, "moves_per_hour", None))
    if args.trace == "philly":
        path = args.jobs or trace_file(*PHILLY_JOBS)
        jobs = load_philly(path)
    elif args.trace == "openb":  # a pod list with its departures (``load_openb_jobs``)
        jobs = load_openb_jobs(resolve("--pods", str(args.jobs) if args.jobs else "openb"))
    elif args.trace == "history":
        if args.jobs is None:
            raise ValueError("--trace history needs --jobs FILE (the output of `yard jobs --json`)")
        jobs = load_history(args.jobs)
    else:
        raise ValueError(f"unknown trace {args.trace!r}; use philly, openb or history")
    start = parse_time(args.start) if args.start else None
    end = parse_time(args.end) if args.end else None
    chosen = window(jobs, start, end, args.load, args.max_jobs)
    if not chosen:
        raise ValueError("no jobs in that window")
    elastic = getattr(args, "elastic", "off")
    if elastic != "off":  # linear speedups, up to twice their size (``sim.elastic.linear``)
        chosen = [replace(j, elastic=linear(j.gpus, elastic)) for j in chosen]
    nodes = parse_cluster(args.cluster)
    gpus = sum(len(n.gpus) for n in nodes)
    vcs: tuple[VirtualCluster, ...] = ()
    if args.vc_quotas == "demand":
        vcs = vc_quotas(chosen, gpus)
    elif args.vc_quotas:
        vcs = vc_quotas(chosen, gpus, load_vc_nodes(resolve("--vc-quotas", args.vc_quotas)))
    vcs = vc_settings(vcs, per_vc["--vc-weights"], per_vc["--borrow-limit"], per_vc["--lend-limit"])
    cost = args.suspend_cost
    options = {"suspendable": args.suspendable, "suspend_cost": cost,
               "resize_cost": getattr(args, "resize_cost", RESIZE_COST)}
    started = time.perf_counter()
    data = None if data_model is None else DataCaches(data_model, (n.name for n in nodes), (j.job_id for j in chosen))
    sim = QueueSim(nodes, chosen, policy, vcs=vcs, tick=args.tick, data=data, **options)
    result = sim.run(phase(f"replaying {len(chosen)} jobs"))
    summary = report(result)
    summary["seconds"] = time.perf_counter() - started
    summary["window"] = [args.start, args.end]
    summary["load"] = args.load
    summary["cluster"] = args.cluster
    summary["suspendable"] = args.suspendable
    summary["suspend_cost_s"] = cost
    summary["elastic"] = elastic
    summary["grows"], summary["shrinks"] = result.grows, result.shrinks
    summary["time_slice_s"] = policy.config.time_slice if policy.config.timeshare else None
    summary["borrowing"] = policy.config.borrowing
    summary["fair_share_half_life_s"] = policy.config.fair_share_half_life
    summary["max_starts"] = policy.config.max_starts
    summary["moves_per_hour"] = policy.config.moves_per_hour
    summary["vc_settings"] = {v.name: {"quota_gpus": sum(v.quota.values()), "weight": v.weight,
                                       "borrow_limit": v.borrow_limit, "lend_limit": v.lend_limit} for v in vcs}
    if vcs:
        summary["sharing"] = sharing_anomaly(chosen, vcs, summary, policy, args.tick,
                                             phase(f"each of {len(vcs)} VCs alone"), **options)
    if args.out is not None:
        _write_jobs(result, args.out)
    return summary


def parse_per_vc(option: str, text: str | None, kind: type[float] | type[int]) -> dict[str, Any]:
    """``VC=VALUE,...`` → {VC: VALUE}; ValueError naming the option and what is wrong."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        vc, sep, value = item.partition("=")
        try:
            if not sep or not vc.strip():
                raise ValueError
            out[vc.strip()] = kind(value.strip())
        except ValueError:
            what = "a number" if kind is float else "a whole number of GPUs"
            raise ValueError(f"{option}: {item.strip()!r} is not VC=VALUE with VALUE {what} "
                             f"(e.g. {option} a=2,b=1)") from None
    return out


def _write_jobs(result: QueueResult, path: Path) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["job_id", "vc", "gpus", "submit", "duration_s", "first_start", "end", "jct_s", "queueing_s",
                      "preemptions", "suspensions", "borrowed_starts", "reclaims"])
        for o in sorted(result.outcomes.values(), key=lambda o: o.job.job_id):
            out.writerow([o.job.job_id, o.job.vc, o.job.gpus, o.job.submit, o.job.duration, o.first_start, o.end,
                          o.jct if o.end is not None else "", o.queueing if o.end is not None else "", o.preemptions,
                          o.suspensions, o.borrowed_starts, o.reclaims])


def print_report(s: dict[str, Any]) -> None:
    print(f"policy {s['policy']} on {s['cluster']} ({s['gpus']} GPUs): {s['jobs']} jobs"
          + (f", {s['rejected']} larger than the cluster or their VC's quota (not run)" if s["rejected"] else "")
          + (f", {s['never_started']} never started (no node shape holds them)" if s["never_started"] else ""))
    print(f"  JCT           avg {s['avg_jct_h']:.2f} h   median {s['median_jct_h']:.2f} h   p99 {s['p99_jct_h']:.2f} h")
    print(f"  queueing      avg {s['avg_queueing_h']:.2f} h   p99 {s['p99_queueing_h']:.2f} h")
    print(f"  makespan      {s['makespan_h']:.1f} h   GPU utilisation {100 * s['gpu_utilisation']:.1f} %   "
          f"preemptions {s['preemptions']}   ({s['seconds']:.1f} s to simulate)")
    if s["time_slice_s"] is not None or s["suspensions"]:
        print(f"  time-sharing  {s['suspendable']} jobs suspendable, slice {(s['time_slice_s'] or 0) / 60:g} min, "
              f"{s['suspend_cost_s']:g} s per suspension: {s['suspensions']} suspensions "
              f"({s['suspensions_per_job_hour']:.3f} per job-hour), {s['lost_gpu_hours']:.0f} GPU-h lost "
              f"({100 * s['lost_share_of_busy']:.2f} % of busy GPU time)")
    print(f"  large jobs    {s['large_jobs']} of {LARGE_JOB_GPUS}+ GPUs: queueing avg "
          f"{s['large_avg_queueing_h']:.2f} h   p99 {s['large_p99_queueing_h']:.2f} h")
    if s.get("moves_per_hour"):
        print(f"  consolidation at most {s['moves_per_hour']} moves an hour: {s['moves']} moves, "
              f"{s['move_lost_gpu_hours']:.1f} GPU-h lost to them")
    if "data" in s:
        d = s["data"]
        print(f"  datasets      hit rate {100 * d['hit_rate']:.1f} % ({d['hits']} hits, {d['misses']} misses), "
              f"{d['fetched_tb']:.1f} TB fetched, {d['evictions']} evictions; a start's wait for its data avg "
              f"{d['avg_fetch_wait_s']:.0f} s, p99 {d['p99_fetch_wait_s']:.0f} s ({d['fetch_gpu_hours']:.0f} GPU-h); "
              f"{d['preferred_starts']} starts with nodes to prefer")
    if s.get("elastic", "off") != "off":
        print(f"  elastic       every job, from {s['elastic']} (linear speedup, up to twice its GPUs): "
              f"{s['grows']} grows, {s['shrinks']} shrinks")
    half_life = s["fair_share_half_life_s"]
    print(f"  borrowing     {'on' if s['borrowing'] else 'off'}: {s['borrowed_jobs']} jobs ran borrowed "
          f"({s['borrowed_starts']} starts, {s['borrowed_gpu_hours']:.0f} GPU-h), {s['reclaimed_jobs']} reclaimed "
          f"({s['reclaims']} times, {s['reclaim_suspensions']} suspended, the rest requeued); fair share "
          + (f"half-life {half_life / HOUR:g} h" if half_life > 0 else "off"))
    print("  by VC         jobs  mean JCT  mean queue  p99 queue  GPUs used  borrowed  jobs borrowed  reclaimed")
    for vc, row in s["vcs"].items():
        print(f"    {vc:>10} {row['jobs']:>6} {row['avg_jct_h']:>7.2f}h {row['avg_queueing_h']:>9.2f}h "
              f"{row['p99_queueing_h']:>9.2f}h {row['mean_gpus']:>10.1f} {row['mean_borrowed_gpus']:>9.1f} "
              f"{row['borrowed_jobs']:>14} {row['reclaimed_jobs']:>10}")
    if "sharing" in s:
        print("  sharing anomaly (mean queueing, h): VC quota shared alone")
        for vc, row in s["sharing"].items():
            flag = "  WORSE for sharing" if row["worse_for_sharing"] else ""
            shared = row["shared_avg_queueing_h"]
            print(f"    {vc:>8} {row['quota_gpus']:>5} {shared if shared is None else f'{shared:.2f}':>7} "
                  f"{row['alone_avg_queueing_h']:.2f}{flag}")
    sys.stdout.flush()
