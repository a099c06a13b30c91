"""How `yard job ID --metrics` shows a job's history: per task, now / mean / max of each
figure with a sparkline of the window, "n/a" where a figure was not measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trainyard.cli.render import size, table, when
from trainyard.core.durations import format_duration
from trainyard.schemas.history import JobMetrics, TaskPointView

SPARK = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 30
MIB = 1 << 20

# What the table shows of each point, and how a value is written.
FIGURES: tuple[tuple[str, Callable[[TaskPointView], float | None], Callable[[float], str]], ...] = (
    ("GPU util", lambda p: p.gpuUtilPct, lambda v: f"{v:.0f}%"),
    ("GPU memory", lambda p: p.gpuMemoryMB, lambda v: size(round(v * MIB))),
    ("CPU cores", lambda p: p.cpuCores, lambda v: f"{v:.2f}"),
    ("Memory", lambda p: p.memoryMB, lambda v: size(round(v * MIB))),
)


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    """The values as at most ``width`` bars scaled from 0 to their max; a gap where not measured."""
    if not values:
        return ""
    per = -(-len(values) // width)
    groups = [values[i:i + per] for i in range(0, len(values), per)]
    means = [_mean(g) for g in groups]
    top = max((m for m in means if m is not None), default=None)
    if top is None:
        return ""
    return "".join(" " if m is None else SPARK[round(m / top * (len(SPARK) - 1)) if top else 0]
                   for m in means)


def _mean(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return sum(measured) / len(measured) if measured else None


def job_metrics_text(metrics: JobMetrics) -> str:
    """The job's tasks, one table each."""
    resolution = "raw samples" if metrics.step == 0 else f"{format_duration(metrics.step)} averages"
    head = f"Job {metrics.job}: {when(metrics.since)} to {when(metrics.until)} ({resolution})"
    if not metrics.tasks:
        return head + "\nno samples in this window (the job did not run then, or it is older than the history keeps)"
    parts = [head]
    for task in metrics.tasks:
        rows = []
        for name, figure, shown in FIGURES:
            values = [figure(p) for p in task.points]
            measured = [v for v in values if v is not None]
            now = values[-1] if values else None
            rows.append([
                name,
                "n/a" if now is None else shown(now),
                shown(sum(measured) / len(measured)) if measured else "n/a",
                shown(max(measured)) if measured else "n/a",
                sparkline(values),
            ])
        parts.append(f"\n{task.role}/{task.index}  ({len(task.points)} points)\n"
                     + table(["", "NOW", "MEAN", "MAX", "TREND"], rows))
    return "\n".join(parts)
