"""Held-out openb pod lists: resampled the way the FGD authors made theirs, at shares nobody
tuned ``fgd-cpu`` on. Seeded, so the same files come out every time.

* ``cpuNNN`` — the default list's GPU pods (those of ``cpu0``) and CPU-only pods drawn, with
  replacement, from the default list's CPU-only pods until they are NN.N % of all pods (the
  authors' ``cpu*`` lists keep the GPU pods and change the CPU-only share the same way);
* ``gpuspecNN`` — the default list, each pod taking the GPU-model limit ``gpuspec20`` gives it
  with the probability that makes about NN % of the GPU pods limited (the authors' ``gpuspec*``
  lists are the default list with limits added);
* ``gpushareNN`` — the default list's CPU-only pods and as many GPU pods as it has, each drawn,
  with replacement, from its GPU-sharing pods with probability NN % and from its other GPU
  pods otherwise (the authors' ``gpushare*`` lists change the share of sharing GPU pods);
* ``cpuNNNspecMM`` — CPU-only and model-limited shares changed at once.

    python benchmarks/make_openb_variants.py --out benchmarks/out/openb_heldout
    python benchmarks/bench_sim_openb.py --variants benchmarks/out/openb_heldout/cpu250.csv,... \\
        --policies fgd,default --seeds 60-64 --stop 101 --out benchmarks/out/sim_openb_heldout
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.sim.traces import open_text, trace_file  # noqa: E402

CPU_SHARES = {"cpu150": 0.150, "cpu250": 0.250, "cpu270": 0.270}
SPEC_SHARES = {"gpuspec07": 0.07, "gpuspec08": 0.08, "gpuspec15": 0.15}
SHARE_SHARES = {"gpushare30": 0.30, "gpushare50": 0.50, "gpushare70": 0.70}
BOTH = {"cpu250spec10": (0.250, 0.10), "cpu270spec07": (0.270, 0.07)}


def rows(variant: str) -> tuple[list[str], list[dict[str, str]]]:
    """A shipped openb pod list (or the one in ``$TRAINYARD_TRACES``): its columns and rows."""
    with open_text(trace_file("openb", f"openb_pod_list_{variant}.csv")) as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or ()), list(reader)


def with_cpu_share(pods: list[dict[str, str]], share: float, rng: random.Random) -> list[dict[str, str]]:
    gpu = [p for p in pods if int(p["num_gpu"] or 0) > 0]
    cpu_only = [p for p in pods if int(p["num_gpu"] or 0) == 0]
    wanted = round(len(gpu) * share / (1 - share))
    return gpu + [dict(rng.choice(cpu_only)) for _ in range(wanted)]


def with_spec_share(
    pods: list[dict[str, str]], limits: dict[str, str], share: float, rng: random.Random
) -> list[dict[str, str]]:
    gpu = sum(1 for p in pods if int(p["num_gpu"] or 0) > 0)
    limited = sum(1 for p in pods if limits.get(p["name"]))
    keep = min(1.0, share * gpu / limited)
    return [dict(p, gpu_spec=limits[p["name"]]) if limits.get(p["name"]) and rng.random() < keep else p for p in pods]


def with_sharing_share(pods: list[dict[str, str]], share: float, rng: random.Random) -> list[dict[str, str]]:
    cpu_only = [p for p in pods if int(p["num_gpu"] or 0) == 0]
    gpu = [p for p in pods if int(p["num_gpu"] or 0) > 0]
    sharing = [p for p in gpu if int(p["gpu_milli"] or 0) < 1000]
    whole = [p for p in gpu if int(p["gpu_milli"] or 0) >= 1000]
    return cpu_only + [dict(rng.choice(sharing if rng.random() < share else whole)) for _ in gpu]


def write(path: Path, fields: list[str], pods: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for i, p in enumerate(pods):
            writer.writerow(dict(p, name=f"heldout-pod-{i:05d}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/openb_heldout"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    fields, default = rows("default")
    limits = {p["name"]: p["gpu_spec"] for p in rows("gpuspec20")[1]}
    made = {}
    for name, share in CPU_SHARES.items():
        made[name] = with_cpu_share(default, share, random.Random(f"heldout-{name}"))
    for name, share in SPEC_SHARES.items():
        made[name] = with_spec_share(default, limits, share, random.Random(f"heldout-{name}"))
    for name, share in SHARE_SHARES.items():
        made[name] = with_sharing_share(default, share, random.Random(f"heldout-{name}"))
    for name, (cpu, spec) in BOTH.items():
        rng = random.Random(f"heldout-{name}")
        made[name] = with_cpu_share(with_spec_share(default, limits, spec, rng), cpu, rng)
    for name, pods in made.items():
        write(args.out / f"{name}.csv", fields, pods)
        print(args.out / f"{name}.csv", len(pods), "pods")


if __name__ == "__main__":
    main()
