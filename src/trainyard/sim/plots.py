"""Plots like the FGD paper's: GPU allocation against arrived demand, one line per policy.

Imports matplotlib (with the non-interactive Agg backend); import this module only in the
commands that draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_allocation(
    curves: Sequence[tuple[str, Sequence[float | None]]], path: Path, title: str, *, x_from: int = 0
) -> None:
    """``curves``: (label, allocation % per arrived-demand %) pairs; writes a PNG from
    ``x_from`` % arrived demand on (80 shows where policies differ)."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    top = 0
    for label, curve in curves:
        points = [(k, v) for k, v in enumerate(curve) if v is not None and k >= x_from]
        xs = [k for k, _ in points]
        top = max([top, *xs])
        ax.plot(xs, [v for _, v in points], label=label, linewidth=1.4)
    ax.plot([x_from, 100, max(top, 100)], [x_from, 100, 100], color="grey", linestyle=":", linewidth=1, label="limit")
    ax.set_xlabel("arrived GPU demand (% of cluster GPUs)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_bars(rows: Sequence[tuple[str, float, float]], path: Path) -> None:
    """Per pod list: FGD's and the default's allocation % at 100 % arrived demand."""
    fig, ax = plt.subplots(figsize=(9.0, 4.0), dpi=120)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[1] for r in rows], width=0.4, label="fgd")
    ax.bar([x + 0.2 for x in xs], [r[2] for r in rows], width=0.4, label="default (fgd-cpu)")
    ax.set_xticks(list(xs), [r[0] for r in rows], rotation=60, fontsize=8)
    low = min(min(r[1], r[2]) for r in rows)
    ax.set_ylim(max(0.0, low - 3), 100)
    ax.set_ylabel("GPUs allocated at 100 % arrived (%)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_grid(
    panels: Sequence[tuple[str, Sequence[tuple[str, Sequence[float | None]]]]], path: Path, *, x_from: int = 80
) -> None:
    """One small allocation plot per pod list (``(title, curves)`` pairs), from ``x_from`` %
    arrived demand on, in one PNG."""
    columns = 4
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.4 * rows), dpi=100, squeeze=False)
    for ax, (title, curves) in zip(axes.flat, panels, strict=False):
        for label, curve in curves:
            xs = [k for k, v in enumerate(curve) if v is not None and k >= x_from]
            ax.plot(xs, [curve[k] for k in xs], label=label, linewidth=1.2)
        ax.plot([x_from, 100], [x_from, 100], color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, loc="lower right")
    fig.supxlabel("arrived GPU demand (% of cluster GPUs)", fontsize=9)
    fig.supylabel("GPUs allocated (%)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_queue_policies(
    rows: Sequence[tuple[str, str, float, float]], goals: dict[str, tuple[float, float]], path: Path, title: str
) -> None:
    """The queueing track's policies side by side: mean JCT and p99 queueing delay (hours),
    one group of bars per load. ``rows``: (load, policy, mean JCT, p99 queueing), in the
    order to draw; ``goals``: per load, the (mean JCT, p99 queueing) to stay under, drawn
    as dashed lines over that load's group."""
    loads = list(dict.fromkeys(load for load, *_ in rows))
    policies = list(dict.fromkeys(policy for _, policy, *_ in rows))
    values = {(load, policy): (jct, p99) for load, policy, jct, p99 in rows}
    width = 0.8 / len(policies)
    fig, axes = plt.subplots(1, 2, figsize=(10.0, 4.2), dpi=120)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for panel, (ax, label) in enumerate(zip(axes, ("mean JCT (h)", "p99 queueing delay (h)"), strict=True)):
        for k, policy in enumerate(policies):
            xs = [x - 0.4 + width * (k + 0.5) for x, load in enumerate(loads) if (load, policy) in values]
            ys = [values[(load, policy)][panel] for load in loads if (load, policy) in values]
            bars = ax.bar(xs, ys, width=width * 0.95, label=policy, color=colours[k % len(colours)])
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
        for x, load in enumerate(loads):
            if load in goals:
                ax.hlines(goals[load][panel], x - 0.42, x + 0.42, colors="black", linestyles="dashed", linewidth=1)
        ax.set_xticks(range(len(loads)), [f"load {load}" for load in loads])
        ax.set_ylabel(label)
        if panel == 1:  # tails span hundredths to hours: log; means differ by tens of percent: linear
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="lower center", ncol=len(policies))
    fig.suptitle(title + " (dashed: the goal)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path)
    plt.close(fig)
