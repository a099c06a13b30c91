"""The placement track on every openb pod list: the numbers and plots of docs/benchmarks.md.

For each pod list and policy, runs the FGD protocol (``yard sim placement``'s code) per seed
and keeps each seed's result in ``--out/results.json`` (so a long sweep can stop and go on:
what is there is not run again). ``--render`` prints the markdown tables from that file and
draws the plots, comparing with the FGD authors' own results where they have the pod list.

    python benchmarks/bench_sim_openb.py --variants default \
        --policies random,dotprod,clustering,packing,bestfit,fgd,default --seeds 42-51
    python benchmarks/bench_sim_openb.py --variants all --policies fgd,default --seeds 42-51 --stop 101
    python benchmarks/bench_sim_openb.py --render

Prints; never asserts.
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

from trainyard.sim.openb import gpu_capacity, load_nodes, load_pods, seeded_names, tune, workload_of  # noqa: E402
from trainyard.sim.placement import run_placement  # noqa: E402
from trainyard.sim.placement_track import parse_seeds, read_reference  # noqa: E402
from trainyard.sim.policies import PAPER_LABELS, scorer_name  # noqa: E402
from trainyard.sim.traces import FGD_REFERENCE, OPENB_NODES, openb_variants, resolve, trace_file  # noqa: E402

POINTS = ("50", "80", "90", "100", "110", "130")


def run(args: argparse.Namespace) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    nodes = load_nodes(trace_file(*OPENB_NODES))
    capacity = gpu_capacity(nodes)
    names = openb_variants() if args.variants == "all" else args.variants.split(",")
    for source in names:
        # a file (a held-out list of make_openb_variants.py) is keyed by its name
        variant = Path(source).stem if source.endswith(".csv") else source
        pods = load_pods(resolve("--pods", source if source.endswith(".csv") else f"openb:{variant}"))
        workload = workload_of(pods)
        for policy in args.policies.split(","):
            scorer = scorer_name(policy)
            for seed in parse_seeds(args.seeds):
                key = f"{variant}|{policy}|{seed}"
                if key in results and results[key]["stop"] >= args.stop:
                    continue
                tuned = tune(pods, capacity, 1.3, seed)
                started = time.perf_counter()
                placed = run_placement(seeded_names(nodes, seed), tuned, scorer, workload,
                                       job_id_base=seed * 10_000_000,
                                       stop_at_pct=None if args.stop >= 130 else args.stop)
                seconds = time.perf_counter() - started
                alloc, frag = placed.curve(placed.allocated), placed.curve(placed.fragmented)
                results[key] = {"stop": args.stop, "seconds": seconds, "alloc": alloc, "frag": frag,
                                "pods": len(tuned), "failed": placed.failed}
                store.write_text(json.dumps(results))
                print(f"{variant:>12} {policy:>10} seed {seed}: {alloc[100]:.2f} % at 100 % arrived, "
                      f"{seconds:.1f} s", flush=True)


def mean_curve(results: dict, variant: str, policy: str, which: str = "alloc") -> tuple[list, int]:
    runs = [r for k, r in results.items() if k.startswith(f"{variant}|{policy}|")]
    curve = []
    for i in range(131):
        values = [r[which][i] for r in runs if i < len(r[which]) and r[which][i] is not None]
        curve.append(sum(values) / len(values) if values else None)
    return curve, len(runs)


def _reference(reference: Path, variant: str, label: str) -> float | None:
    try:
        return read_reference(reference, f"openb_pod_list_{variant}", label)[0]
    except ValueError:
        return None


def render(args: argparse.Namespace) -> None:
    results: dict = {}
    for folder in args.out_dirs or [args.out]:
        results.update(json.loads((folder / "results.json").read_text()))
    reference = trace_file(*FGD_REFERENCE)
    names = sorted({k.split("|")[0] for k in results})
    policies = [p for p in ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "default")
                if any(k.split("|")[1] == p for k in results)]
    for variant in names:  # full tables where every policy ran
        present = [p for p in policies if mean_curve(results, variant, p)[1]]
        if len(present) < 3:
            continue
        print(f"\n#### `openb_pod_list_{variant}`: GPU allocation % by arrived demand\n")
        print("| policy | seeds | " + " | ".join(f"{p} %" for p in POINTS) + " | authors @100 % | Δ | s/run |")
        print("|---|---|" + "---|" * len(POINTS) + "---|---|---|")
        curves = []
        for policy in present:
            curve, n = mean_curve(results, variant, policy)
            runs = [r for k, r in results.items() if k.startswith(f"{variant}|{policy}|")]
            seconds = sum(r["seconds"] for r in runs) / len(runs)
            ref = _reference(reference, variant, PAPER_LABELS.get(policy, PAPER_LABELS["fgd"]))
            paper = "" if ref is None else f"{ref:.2f}" + (" (FGD)" if policy == "default" else "")
            delta = "" if ref is None else f"{curve[100] - ref:+.2f}"
            cells = " | ".join("-" if curve[int(p)] is None else f"{curve[int(p)]:.2f}" for p in POINTS)
            print(f"| {policy} | {n} | {cells} | {paper} | {delta} | {seconds:.1f} |")
            curves.append((policy, curve))
        if args.plots:
            from trainyard.sim.plots import plot_allocation

            args.plots.mkdir(parents=True, exist_ok=True)
            plot_allocation(curves, args.plots / f"openb_{variant}_alloc.png", f"openb_pod_list_{variant}")
            plot_allocation(curves, args.plots / f"openb_{variant}_alloc_80.png", f"openb_pod_list_{variant}",
                            x_from=80)
    print("\n#### Trainyard's default against FGD at 100 % arrived demand, every pod list\n")
    print("| pod list | seeds | FGD (ours) | default | default − FGD | default's gap to 100 % "
          "| authors' FGD | default − authors' FGD | seeds default > FGD |")
    print("|---|---|---|---|---|---|---|---|---|")
    bars = []
    for variant in names:
        fgd, n = mean_curve(results, variant, "fgd")
        default, m = mean_curve(results, variant, "default")
        if not n or not m:
            continue
        ref = _reference(reference, variant, PAPER_LABELS["fgd"])
        wins = sum(
            1 for k, r in results.items() if k.startswith(f"{variant}|default|")
            and f"{variant}|fgd|{k.split('|')[2]}" in results
            and r["alloc"][100] > results[f"{variant}|fgd|{k.split('|')[2]}"]["alloc"][100]
        )
        print(f"| {variant} | {min(n, m)} | {fgd[100]:.2f} | {default[100]:.2f} | {default[100] - fgd[100]:+.2f} "
              f"| {100 - default[100]:.2f} | {'' if ref is None else f'{ref:.2f}'} "
              f"| {'' if ref is None else f'{default[100] - ref:+.2f}'} | {wins}/{min(n, m)} |")
        bars.append((variant, fgd[100], default[100]))
    if args.plots and bars:
        from trainyard.sim.plots import plot_bars, plot_grid

        args.plots.mkdir(parents=True, exist_ok=True)
        plot_bars(bars, args.plots / "openb_default_vs_fgd.png")
        panels = [
            (variant, [(p, mean_curve(results, variant, p)[0]) for p in ("fgd", "default")]) for variant, _, _ in bars
        ]
        plot_grid(panels, args.plots / "openb_every_list_alloc.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="default", help="comma-separated pod list suffixes or .csv files, or all")
    parser.add_argument("--policies", default="fgd,default")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--stop", type=float, default=130, help="end each run at this %% of arrived demand")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "sim_openb")
    parser.add_argument("--render", action="store_true", help="print the tables (and --plots) from the results")
    parser.add_argument("--plots", type=Path, help="with --render: write PNGs into this folder")
    parser.add_argument("--out-dirs", type=Path, nargs="*", help="with --render: merge the results of these folders")
    args = parser.parse_args(argv)
    render(args) if args.render else run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
