"""``yard sim``: replay a trace through the live scheduler's code, offline.

Only argparse is imported here; the simulator (and matplotlib) load when a command runs,
so that ``yard --help`` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from trainyard.cli.progress import ProgressBar
from trainyard.sim.defaults import ELASTIC, RESIZE_COST, SUSPEND_COST, SUSPENDABLE

if TYPE_CHECKING:  # for annotations only: the simulator loads when a command runs
    from trainyard.sim.placement_track import SeedResult


def add_sim_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sim", help="simulate scheduling policies on a public trace or your own history")
    sim_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    q = sim_sub.add_parser(
        "placement",
        help="the FGD paper's placement track: pods arrive, never leave; GPU allocation by arrived demand",
    )
    q.add_argument("--nodes", required=True,
                   help="openb (the paper's GPU nodes, shipped with Trainyard) or an openb node list CSV")
    q.add_argument("--pods", required=True,
                   help="openb (its default pod list), openb:VARIANT (e.g. openb:gpushare40) or a pod list CSV")
    q.add_argument("--policy", default="default",
                   help="random, dotprod, clustering, packing, bestfit, fgd, default, or scorer:NAME")
    q.add_argument("--seeds", default="42-51", help="tuning seeds, e.g. 42-51 or 42,43 (default 42-51)")
    q.add_argument("--tune", type=float, default=1.3, help="inflate the pods to this share of GPU capacity")
    q.add_argument("--out", type=Path, default=Path("."), help="folder for the CSV and PNG (default: here)")
    q.add_argument("--no-plot", action="store_true", help="skip the PNG")
    q.add_argument("--json", action="store_true", help="print the summary as JSON (and no progress bar)")

    q = sim_sub.add_parser("queue", help="the queueing track: jobs arrive and finish; JCT, queueing delay, utilisation")
    q.add_argument("--trace", default="philly",
                   help="philly (a Philly job table), openb (an openb pod list, its pods arriving and leaving) "
                   "or history (yard's own export)")
    q.add_argument("--jobs", type=Path, help="the job table (default: the Philly trace shipped with Trainyard; "
                   "for --trace openb, its default pod list, or openb:VARIANT)")
    q.add_argument("--cluster", default="92x8",
                   help="NxG (N nodes of G GPUs), philly (Philly's 552 machines), or a machine list CSV")
    q.add_argument("--policy", default="default",
                   help="fifo, sjf, tiresias, default (with time-sharing) or easy (the default without it)")
    q.add_argument("--suspendable", default="all", choices=SUSPENDABLE,
                   help="which jobs can be suspended to take turns: all (default), half (even ids) or none")
    q.add_argument("--suspend-cost", type=float, default=SUSPEND_COST, metavar="SECONDS",
                   help="GPU time a suspension costs the job: checkpoint save and restore (default %(default)g)")
    q.add_argument("--elastic", default="off", choices=ELASTIC,
                   help="make every job elastic (linear speedup, up to twice its GPUs), from the GPUs it asked, "
                   "half of them, or 1: it grows into idle GPUs and shrinks for waiting jobs (default off)")
    q.add_argument("--resize-cost", type=float, default=RESIZE_COST, metavar="SECONDS",
                   help="seconds without progress an elastic job's resize costs: a restart (default %(default)g)")
    q.add_argument("--time-slice", type=float, metavar="SECONDS",
                   help="time-sharing's minimum time slice (default: the scheduler's, 1800)")
    q.add_argument("--start", help="first submit time to include (YYYY-MM-DD[THH:MM])")
    q.add_argument("--end", help="submit times before this (YYYY-MM-DD[THH:MM])")
    q.add_argument("--load", type=float, default=1.0, help="compress inter-arrival times by this factor")
    q.add_argument("--max-jobs", type=int, help="only the first N jobs of the window")
    q.add_argument("--vc-quotas", nargs="?", const="philly", metavar="philly|demand|FILE",
                   help="give each VC a quota: Philly's nodes per VC (default), its share of the demand, "
                   "or a vc,node num CSV; then compare each VC's delay with its delay alone on its quota")
    q.add_argument("--borrowing", choices=("on", "off"),
                   help="whether a job over its VC's quota may run on other VCs' idle GPUs as reclaimable "
                   "borrowed work (default: the scheduler's, on)")
    q.add_argument("--fair-share-half-life", type=float, metavar="SECONDS",
                   help="fair share's half-life: users (and borrowing VCs) with less recent usage go first; "
                   "0: off, submit order (default: the scheduler's, 604800)")
    q.add_argument("--vc-weights", metavar="VC=W,...",
                   help="weights idle GPUs are shared by among borrowing VCs (default 1 each); needs --vc-quotas")
    q.add_argument("--borrow-limit", metavar="VC=GPUS,...",
                   help="at most this many GPUs a VC may borrow (default: no limit; 0: never); needs --vc-quotas")
    q.add_argument("--lend-limit", metavar="VC=GPUS,...",
                   help="at most this many of a VC's idle quota GPUs may be lent (default: all; 0: none); "
                   "needs --vc-quotas")
    q.add_argument("--max-starts", type=int, metavar="JOBS",
                   help="at most this many jobs started per cycle, the next cycle following at once "
                   "(`yard up`'s scheduler_max_starts_per_cycle; default: no bound)")
    q.add_argument("--moves-per-hour", type=int, metavar="MOVES",
                   help="consolidation: at most this many suspendable jobs moved an hour to free a node for a "
                   "waiting gang (`yard up`'s scheduler_moves_per_hour; default: the scheduler's, 0: off)")
    q.add_argument("--tick", type=float, default=60.0,
                   help="seconds between scheduling cycles, as the controller's tick (0: a cycle per event)")
    q.add_argument("--datasets", type=int, metavar="K",
                   help="model datasets near the GPUs: every job reads one of K (Zipf popularity), fetched at its "
                   "start into each of its nodes' caches unless there (default: no datasets)")
    q.add_argument("--dataset-skew", type=float, default=1.0, metavar="S",
                   help="the datasets' Zipf exponent: the i-th is read in proportion to 1/i^S (default 1; 0: alike)")
    q.add_argument("--dataset-gb", default="1:100", metavar="MIN:MAX",
                   help="the datasets' sizes, log-uniform between MIN and MAX GB (default 1:100)")
    q.add_argument("--cache-gb", type=float, default=100.0, metavar="GB",
                   help="each node's dataset cache, least recently used out (`yard up`'s dataset_cache_gb; "
                   "default 100)")
    q.add_argument("--fetch-gbps", type=float, default=0.5, metavar="GB/S",
                   help="how fast a node fetches a dataset from its source (default 0.5 GB/s)")
    q.add_argument("--data-placement", choices=("on", "off"), default="on",
                   help="whether placement prefers the nodes that hold a waiting job's dataset, among nodes that "
                   "fit alike (the live scheduler's data_nodes; default on)")
    q.add_argument("--data-ahead", type=int, default=2, metavar="JOBS",
                   help="as the controller: a job has the nodes holding its data to prefer as they were when it "
                   "arrived, the first JOBS of each VC as they are now (default 2; 0: every waiting job as now)")
    q.add_argument("--out", type=Path, help="write per-job results as CSV here")
    q.add_argument("--json", action="store_true", help="print the report as JSON (and no progress bar)")


def run_sim(args: argparse.Namespace) -> int:
    try:
        if args.action == "placement":
            return _placement(args)
        return _queue(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"yard sim {args.action}: {e}", file=sys.stderr)
        return 2


def _placement(args: argparse.Namespace) -> int:
    from trainyard.sim.openb import load_nodes, load_pods
    from trainyard.sim.placement_track import SUMMARY_POINTS, parse_seeds, run_track, write_csv
    from trainyard.sim.traces import resolve, trace_stem

    seeds = parse_seeds(args.seeds)
    if not args.tune > 0:  # also NaN
        raise ValueError(f"--tune must be > 0 (a share of the cluster's GPUs, e.g. 1.3); got {args.tune}")
    nodes = load_nodes(resolve("--nodes", args.nodes))
    pods_file = resolve("--pods", args.pods)
    pods = load_pods(pods_file)
    pod_list = trace_stem(pods_file)
    plot_allocation = None if args.no_plot else _plotter()  # said before minutes of simulation

    with ProgressBar(enabled=not args.json) as bar:

        def seed_done(one: SeedResult) -> None:
            if not args.json:
                at = one.alloc[100]
                bar.note(f"seed {one.seed}: {one.pods} pods, {one.failed} failed, "
                         f"{'-' if at is None else f'{at:.2f}'} % allocated at 100 % arrived, {one.seconds:.1f} s")

        def placed(fraction: float) -> None:
            bar.update(f"placing {pod_list}, {len(seeds)} seed(s)", fraction)

        result = run_track(nodes, pods, args.policy, seeds, args.tune, progress=seed_done, on_fraction=placed)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"placement_{pod_list}_{args.policy.replace(':', '-')}"
    csv_path = args.out / f"{stem}.csv"
    write_csv(result, csv_path)
    summary = result.summary()
    summary["csv"] = str(csv_path)
    if plot_allocation is not None:
        png = args.out / f"{stem}.png"
        plot_allocation([(args.policy, result.mean("alloc"))], png,
                        f"{pod_list}: {args.policy}, seeds {args.seeds}, tune {args.tune:g}")
        summary["png"] = str(png)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"policy {args.policy} (scorer {result.scorer}) on {pod_list}, {len(seeds)} seed(s), "
          f"{result.capacity_gpus} GPUs")
    print("arrived %   " + "  ".join(f"{k:>6}" for k in SUMMARY_POINTS))
    print("allocated % " + "  ".join(f"{_num(summary['gpu_alloc_pct'].get(str(k))):>6}" for k in SUMMARY_POINTS))
    print("fragment. % " + "  ".join(f"{_num(summary['frag_gpu_pct'].get(str(k))):>6}" for k in SUMMARY_POINTS))
    print(f"wrote {csv_path}" + (f" and {summary['png']}" if "png" in summary else ""))
    return 0


def _plotter() -> Callable[..., None] | None:
    """The plotting function, or None with a note on stderr where matplotlib (an extra) is
    missing: the numbers and the CSV are the result, and a run must not fail for want of a
    picture after minutes of simulation."""
    try:
        from trainyard.sim.plots import plot_allocation
    except ModuleNotFoundError as e:
        print(f"yard sim placement: no plot: it needs {e.name} (pip install 'trainyard[sim]'; "
              "--no-plot skips it without this note)", file=sys.stderr)
        return None
    return plot_allocation


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _queue(args: argparse.Namespace) -> int:
    from trainyard.sim.queue_track import print_report, run_queue_command

    with ProgressBar(enabled=not args.json) as bar:
        summary = run_queue_command(args, on_fraction=bar.update)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print_report(summary)
    return 0
