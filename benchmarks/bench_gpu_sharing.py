"""What safe GPU sharing costs in allocation on openb's GPU-sharing pod lists.

Fractional GPU shares of different users share a device only where their VCs allow it
(``same-user`` by default; docs/scheduling.md, "GPU sharing between users"). openb's pods
have no users, so each pod of a tuned list is given an owner drawn uniformly from ``U``
users (``u0`` … ``u{U-1}``), seeded by the list's seed (``random.Random(f"owners-{seed}")``,
one draw per pod in arrival order). Each list is then placed by the default scorer under
``anyone`` (any shares may meet: the allocation without the rule, the same as without
owners) and under ``same-user``, as ``bench_sim_openb.py`` places it (the FGD protocol,
tuned to 130 %), and the allocation at 100 % arrived demand is compared.

    python benchmarks/bench_gpu_sharing.py [--variants gpushare20,gpushare40,gpushare60,gpushare80]
        [--users 10,50] [--seeds 42-51] [--out benchmarks/out/gpu_sharing]
    python benchmarks/bench_gpu_sharing.py --render [--seeds 42-51]

Results are kept per run in ``--out/results.json`` (a stopped sweep goes on where it was).
Prints; never asserts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.core.sharing import GpuSharing  # noqa: E402
from trainyard.sim.openb import gpu_capacity, load_nodes, load_pods, seeded_names, tune, workload_of  # noqa: E402
from trainyard.sim.placement import run_placement  # noqa: E402
from trainyard.sim.placement_track import parse_seeds  # noqa: E402
from trainyard.sim.policies import scorer_name  # noqa: E402
from trainyard.sim.traces import OPENB_NODES, resolve, trace_file  # noqa: E402

STOP = 101  # % of arrived demand: the number compared is the one at 100 %


def owners(count: int, users: int, seed: int) -> list[str]:
    rng = random.Random(f"owners-{seed}")
    return [f"u{rng.randrange(users)}" for _ in range(count)]


def run(args: argparse.Namespace) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    nodes = load_nodes(trace_file(*OPENB_NODES))
    capacity = gpu_capacity(nodes)
    scorer = scorer_name("default")
    # Seeds outermost: a sweep cut short still covers every list.
    for seed in parse_seeds(args.seeds):
        for variant in args.variants.split(","):
            pods = load_pods(resolve("--pods", f"openb:{variant}"))
            workload = workload_of(pods)
            tuned = tune(pods, capacity, 1.3, seed)
            runs = [("anyone", 0)] + [("same-user", int(u)) for u in args.users.split(",")]
            for rule, users in runs:
                key = f"{variant}|{rule}|{users}|{seed}"
                if key in results:
                    continue
                started = time.perf_counter()
                placed = run_placement(
                    seeded_names(nodes, seed), tuned, scorer, workload, job_id_base=seed * 10_000_000, stop_at_pct=STOP,
                    owners=owners(len(tuned), users, seed) if users else None, gpu_sharing=GpuSharing(rule),
                )
                seconds = time.perf_counter() - started
                alloc = placed.curve(placed.allocated)[100]
                results[key] = {"alloc100": alloc, "seconds": seconds, "failed": placed.failed}
                store.write_text(json.dumps(results))
                print(f"{variant:>11} {rule:>9} {users:>3} users seed {seed}: {alloc:.2f} % at 100 %, "
                      f"{seconds:.1f} s", flush=True)


def render(args: argparse.Namespace) -> None:
    results = json.loads((args.out / "results.json").read_text())
    users = [int(u) for u in args.users.split(",")]
    head = "| pod list | seeds | anyone | " + " | ".join(
        f"same-user, {u} users | difference ({u})" for u in users) + " |"
    print(head)
    print("|" + "---|" * (3 + 2 * len(users)))
    for variant in args.variants.split(","):
        runs = {
            (rule, users): {k.split("|")[3]: r["alloc100"] for k, r in results.items()
                            if k.startswith(f"{variant}|{rule}|{users}|")}
            for rule, users in [("anyone", 0), *(("same-user", u) for u in users)]
        }
        # Only seeds run under every setting, so that each difference is seed for seed.
        wanted = {str(seed) for seed in parse_seeds(args.seeds)}
        seeds = sorted(set.intersection(wanted, *(set(r) for r in runs.values())))
        if not seeds:
            continue
        base = runs[("anyone", 0)]
        row = [variant, str(len(seeds)), f"{sum(base[s] for s in seeds) / len(seeds):.2f}"]
        for u in users:
            same = runs[("same-user", u)]
            mean = sum(same[s] for s in seeds) / len(seeds)
            diff = sum(same[s] - base[s] for s in seeds) / len(seeds)
            row += [f"{mean:.2f}", f"{diff:+.2f} pp"]
        print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="gpushare20,gpushare40,gpushare60,gpushare80")
    parser.add_argument("--users", default="10,50", help="numbers of users the pods are drawn from")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "gpu_sharing")
    parser.add_argument("--render", action="store_true", help="print the table from the results kept")
    args = parser.parse_args()
    render(args) if args.render else run(args)


if __name__ == "__main__":
    main()
