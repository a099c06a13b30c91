"""Borrowing and fair share on Philly with VC quotas (issue 30's "Measured"): today's default
(borrowing off, fair share off) against borrowing, and borrowing with fair share.

Each configuration is one ``yard sim queue --vc-quotas --json`` run (the sharing-anomaly
test included: each VC alone on its quota), saved as ``OUT/WINDOW_CONFIG.json`` and reused
if it is there; then the tables: mean JCT, p99 queueing, GPU utilisation (busy GPU-time over
capacity × makespan) and their ratios to today's; per VC, mean JCT and p99 queueing with
the ratio to today's, the GPUs it borrowed on average, and whether it is worse off than
today or than alone. Prints; never asserts.

Each VC alone on its quota is one VC with no users (Philly has none), where neither
borrowing nor fair share can change anything: once today's run has them, the other
configurations reuse its alone figures instead of replaying them (waiting for today's run
if it is still going; ``--replay-alone`` replays them anyway).

    python benchmarks/bench_sim_borrowing.py --window week [--configs today,borrowing,fair] [--out DIR]
    python benchmarks/bench_sim_borrowing.py --window month
    python benchmarks/bench_sim_borrowing.py --window 2017-10-09,2017-10-10   # a slice, to try it
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.cli.main import main  # noqa: E402
from trainyard.sim import queue_track  # noqa: E402

WINDOWS = {"week": ("2017-10-09", "2017-10-16"), "month": ("2017-10-01", "2017-11-01")}
ALONE_WAIT = 3600.0
CONFIGS = {
    "today": ["--borrowing", "off", "--fair-share-half-life", "0"],
    "borrowing": ["--borrowing", "on", "--fair-share-half-life", "0"],
    "fair": ["--borrowing", "on", "--fair-share-half-life", "604800"],
}
LABELS = {"today": "today's default (borrowing off, fair share off)", "borrowing": "borrowing",
          "fair": "borrowing + fair share (7-day half-life)"}


def command(window: tuple[str, str], config: str, extra: list[str]) -> list[str]:
    return ["sim", "queue", "--trace", "philly", "--cluster", "92x8", "--policy", "default", "--vc-quotas",
            "--start", window[0], "--end", window[1], *CONFIGS[config], *extra, "--json"]


def run(path: Path, argv: list[str], alone: Path | None = None) -> dict[str, Any]:
    """The run's JSON report (from ``path`` if there); ``alone``: another run of the same
    window whose figures of each VC alone to reuse (waited for if it is still running,
    up to ``ALONE_WAIT`` seconds; then they are replayed)."""
    if path.is_file() and path.stat().st_size:
        return dict(json.loads(path.read_text()))
    print(f"running: yard {' '.join(argv)}" + (f" (each VC alone: from {alone.name})" if alone else ""),
          file=sys.stderr, flush=True)
    out = io.StringIO()
    replayed = queue_track.sharing_anomaly

    def sharing(jobs: Any, vcs: Any, shared: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        assert alone is not None
        waited = time.monotonic()
        while not (alone.is_file() and alone.stat().st_size) and time.monotonic() - waited < ALONE_WAIT:
            time.sleep(10)
        if alone.is_file() and alone.stat().st_size:
            return reuse_alone(json.loads(alone.read_text())["sharing"], shared)
        return dict(replayed(jobs, vcs, shared, *args, **kwargs))

    if alone is not None:
        queue_track.sharing_anomaly = sharing
    try:
        with contextlib.redirect_stdout(out):
            code = main(argv)
    finally:
        queue_track.sharing_anomaly = replayed
    if code != 0:
        raise SystemExit(f"yard {' '.join(argv)} failed ({code})")
    path.write_text(out.getvalue())
    return dict(json.loads(out.getvalue()))


def reuse_alone(alone: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for vc, row in alone.items():
        together = shared["vc_avg_queueing_h"].get(vc)
        out[vc] = {**row, "shared_avg_queueing_h": together,
                   "worse_for_sharing": together is not None and worse(together, row["alone_avg_queueing_h"])}
    return out


def ratio(value: float, base: float) -> str:
    return "–" if base <= 0 else f"×{value / base:.2f}"


def worse(value: float, base: float) -> bool:
    """Worse by more than 1 % and 36 s (0.01 h): below that it is rounding and tick noise,
    as the sharing-anomaly test counts it."""
    return value > base * 1.01 + 0.01


def render(name: str, runs: dict[str, dict[str, Any]]) -> None:
    base = runs.get("today")
    print(f"\n### {name}\n")
    print("| configuration | jobs | mean JCT | p99 queueing | mean queueing | GPU util. | jobs run borrowed "
          "| of them reclaimed (reclaims: suspended / requeued) | borrowed GPU-h | sim time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for config, r in runs.items():
        def vs(key: str, scale: float = 1.0, unit: str = " h", r: dict[str, Any] = r) -> str:
            text = f"{r[key] * scale:.2f}{unit}"
            return text if base is None or r is base else f"{text} ({ratio(r[key], base[key])})"

        suspended = r["reclaim_suspensions"]
        print(f"| {LABELS[config]} | {r['jobs']} | {vs('avg_jct_h')} | {vs('p99_queueing_h')} "
              f"| {vs('avg_queueing_h')} | {vs('gpu_utilisation', 100, ' %')} | {r['borrowed_jobs']} "
              f"| {r['reclaimed_jobs']} ({suspended} / {r['reclaims'] - suspended}) "
              f"| {r['borrowed_gpu_hours']:.0f} | {r['seconds']:.0f} s |")
    print("\nPer VC: mean JCT and p99 queueing delay (h), ratio to today's; mean GPUs borrowed; "
          "worse off: than today (mean JCT or p99 queueing) or than alone on its quota (mean queueing).\n")
    configs = list(runs)
    head = ["VC", "quota", "jobs"]
    for config in configs:
        head += [f"{config}: mean JCT", f"{config}: p99 queueing"]
    head += [f"{c}: GPUs borrowed" for c in configs if c != "today"] + ["alone: mean queueing", "worse off"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    sharing = next(iter(runs.values())).get("sharing", {})
    for vc in sorted(next(iter(runs.values()))["vcs"]):
        quota = sharing.get(vc, {}).get("quota_gpus", "")
        cells = [vc, str(quota), str(runs[configs[0]]["vcs"][vc]["jobs"])]
        flags = []
        for config in configs:
            row = runs[config]["vcs"][vc]
            was = base["vcs"][vc] if base is not None and config != "today" else None
            for key in ("avg_jct_h", "p99_queueing_h"):
                text = f"{row[key]:.2f}"
                if was is not None:
                    text += f" ({ratio(row[key], was[key])})"
                    if worse(row[key], was[key]):
                        flags.append(f"{config}: {key.split('_')[0] if key == 'avg_jct_h' else 'p99 queueing'} "
                                     "vs today")
                cells.append(text)
        for config in configs:
            if config != "today":
                cells.append(f"{runs[config]['vcs'][vc]['mean_borrowed_gpus']:.1f}")
        alone = sharing.get(vc, {}).get("alone_avg_queueing_h")
        cells.append("–" if alone is None else f"{alone:.2f}")
        for config in configs:
            shared = runs[config].get("sharing", {}).get(vc, {})
            if shared.get("worse_for_sharing"):
                flags.append(f"{config}: vs alone ({shared['shared_avg_queueing_h']:.2f} h)")
        cells.append("; ".join(flags) or "no")
        print("| " + " | ".join(cells) + " |")
    print("\nSharing anomaly: each VC's mean queueing delay (h) shared, per configuration, and alone on its quota.\n")
    print("| VC | " + " | ".join(f"{c}: shared" for c in configs) + " | alone | worse for sharing |")
    print("|" + "---|" * (len(configs) + 3))
    for vc, alone_row in sharing.items():
        shared = [runs[c].get("sharing", {}).get(vc, {}) for c in configs]
        cells = [vc] + ["–" if row.get("shared_avg_queueing_h") is None else f"{row['shared_avg_queueing_h']:.2f}"
                        for row in shared]
        cells.append(f"{alone_row['alone_avg_queueing_h']:.2f}")
        worse_in = [c for c, row in zip(configs, shared, strict=True) if row.get("worse_for_sharing")]
        cells.append(", ".join(worse_in) or "no")
        print("| " + " | ".join(cells) + " |")


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", default="week", help="week, month, or START,END (YYYY-MM-DD[THH:MM])")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "sim_borrowing")
    parser.add_argument("--render-only", action="store_true", help="only the tables, from the JSON there")
    parser.add_argument("--replay-alone", action="store_true",
                        help="replay each VC alone for every configuration (default: reuse today's)")
    args = parser.parse_args(argv)
    window = WINDOWS.get(args.window) or tuple(args.window.split(","))
    if len(window) != 2:
        parser.error("--window: week, month, or START,END")
    name = args.window if args.window in WINDOWS else "_".join(window).replace(":", "")
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for config in args.configs.split(","):
        if config not in CONFIGS:
            parser.error(f"--configs: unknown {config!r}; choose of {', '.join(CONFIGS)}")
        path = args.out / f"{name}_{config}.json"
        if args.render_only:
            if path.is_file() and path.stat().st_size:
                runs[config] = json.loads(path.read_text())
            continue
        alone = None if config == "today" or args.replay_alone else args.out / f"{name}_today.json"
        runs[config] = run(path, command((window[0], window[1]), config, []), alone)
    if runs:
        render(f"Philly {window[0]} to {window[1]}, 92 x 8 GPUs, VC quotas from Philly's nodes per VC", runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main_())
