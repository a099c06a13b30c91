"""The placement track over several seeds: mean curves, the summary, and the CSV."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.scheduler.snapshot import NodeState
from trainyard.sim.openb import Pod, gpu_capacity, seeded_names, tune, workload_of
from trainyard.sim.placement import POINTS, PlacementRun, run_placement
from trainyard.sim.policies import scorer_name
from trainyard.sim.traces import open_text

SUMMARY_POINTS = (50, 80, 90, 100, 110, 130)


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` (or a mix) → the seeds; ValueError on anything else."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"bad seeds {text!r}: use e.g. 42-51 or 42,43") from None
        if high < low:
            raise ValueError(f"bad seeds {text!r}: {part} runs backwards")
        seeds.extend(range(low, high + 1))
    if not seeds:
        raise ValueError("no seeds given: use e.g. 42-51")
    return seeds


@dataclass
class SeedResult:
    seed: int
    pods: int
    placed: int
    failed: int
    seconds: float
    alloc: list[float | None]  # GPU allocation % per arrived-demand %
    frag: list[float | None]  # fragmented GPU % of capacity per arrived-demand %


@dataclass
class TrackResult:
    policy: str
    scorer: str
    capacity_gpus: int
    tune_ratio: float
    seeds: list[SeedResult] = field(default_factory=list)

    def mean(self, which: str) -> list[float | None]:
        out: list[float | None] = []
        for k in range(POINTS):
            values = [getattr(s, which)[k] for s in self.seeds if getattr(s, which)[k] is not None]
            out.append(sum(values) / len(values) if values else None)
        return out

    def summary(self) -> dict[str, Any]:
        alloc, frag = self.mean("alloc"), self.mean("frag")

        def pick(curve: list[float | None]) -> dict[str, float | None]:
            return {str(k): _round(curve[k]) for k in SUMMARY_POINTS if k < len(curve)}

        return {
            "policy": self.policy,
            "scorer": self.scorer,
            "seeds": [s.seed for s in self.seeds],
            "tune": self.tune_ratio,
            "capacity_gpus": self.capacity_gpus,
            "gpu_alloc_pct": pick(alloc),
            "frag_gpu_pct": pick(frag),
            "gpu_alloc_pct_per_seed": {str(s.seed): _round(s.alloc[100]) for s in self.seeds},
            "seconds_per_run": _round(sum(s.seconds for s in self.seeds) / max(1, len(self.seeds))),
            "pods_per_run": round(sum(s.pods for s in self.seeds) / max(1, len(self.seeds))),
            "failed_per_run": round(sum(s.failed for s in self.seeds) / max(1, len(self.seeds))),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_track(
    nodes: Sequence[NodeState],
    pods: Sequence[Pod],
    policy: str,
    seeds: Sequence[int],
    tune_ratio: float = 1.3,
    *,
    stop_at_pct: float | None = None,
    progress: Callable[[SeedResult], None] | None = None,
    on_fraction: Callable[[float], None] | None = None,
) -> TrackResult:
    """Run the FGD protocol for each seed: tune, shuffle, place every pod with ``policy``.

    ``progress`` sees each seed's result as it ends; ``on_fraction`` hears how much of the
    whole track (every seed) is done, 0 to 1, as it goes.
    """
    scorer = scorer_name(policy)
    capacity = gpu_capacity(nodes)
    workload = workload_of(pods)
    result = TrackResult(policy, scorer, capacity // 1000, tune_ratio)
    for done, seed in enumerate(seeds):
        tuned = tune(pods, capacity, tune_ratio, seed)
        started = time.perf_counter()

        def seed_fraction(fraction: float, done: int = done) -> None:
            if on_fraction is not None:
                on_fraction((done + fraction) / len(seeds))

        run: PlacementRun = run_placement(
            seeded_names(nodes, seed),
            tuned,
            scorer,
            workload,
            job_id_base=seed * 10_000_000,
            stop_at_pct=stop_at_pct,
            on_fraction=None if on_fraction is None else seed_fraction,
        )
        seconds = time.perf_counter() - started
        one = SeedResult(
            seed, len(tuned), run.placed, run.failed, seconds, run.curve(run.allocated), run.curve(run.fragmented)
        )
        result.seeds.append(one)
        if progress is not None:
            progress(one)
    return result


def write_csv(result: TrackResult, path: Path) -> None:
    """One row per % of arrived demand: mean allocation and fragmentation over the seeds."""
    alloc, frag = result.mean("alloc"), result.mean("frag")
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["arrived_pct", "gpu_alloc_pct", "frag_gpu_pct", "policy", "scorer", "seeds"])
        seeds = " ".join(str(s.seed) for s in result.seeds)
        for k in range(POINTS):
            if alloc[k] is None:
                continue
            fragmentation = f"{frag[k]:.4f}" if frag[k] is not None else ""
            out.writerow([k, f"{alloc[k]:.4f}", fragmentation, result.policy, result.scorer, seeds])


def read_reference(path: Path, workload: str, label: str, point: int = 100) -> tuple[float, list[float]]:
    """The FGD authors' mean and per-seed allocation % at ``point`` % arrived demand, from
    ``analysis_allo_discrete.csv(.gz)``."""
    values = []
    with open_text(path) as f:
        for row in csv.DictReader(f):
            if row["workload"] == workload and row["sc_policy"] == label:
                values.append(float(row[str(point)]))
    if not values:
        raise ValueError(f"{path}: no reference for {workload} / {label}")
    return sum(values) / len(values), values
