"""``yard usage`` (a table like Slurm's ``sreport``) and the efficiency line ``yard job``
prints for an ended job (like ``seff``): the server's figures, laid out."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from trainyard.cli import plain, render
from trainyard.cli.exits import EXIT_USAGE
from trainyard.client import Client

if TYPE_CHECKING:  # `yard job`'s efficiency line reads the report without the models (cli/plain.py)
    from trainyard.schemas.jobs import JobDetail
    from trainyard.schemas.usage import UsageGrouping, UsageLine, UsageReport

HEADERS = ["NAME", "JOBS", "GPU-HOURS", "GPU EFF", "CPU-HOURS", "CPU EFF", "MEM GIB-HOURS"]
JOB_HEADERS = ["JOB", "NAME", "USER", "VC", "GPU-HOURS", "GPU EFF", "CPU-HOURS", "CPU EFF", "MEM GIB-HOURS"]


def percent(ratio: float | None) -> str:
    """A 0..1 ratio as a whole percent; "n/a" when it was not measured."""
    return "n/a" if ratio is None else f"{ratio * 100:.0f}%"


def hours(value: float) -> str:
    return f"{value:.2f}"


def _figures(line: UsageLine) -> list[str]:
    return [hours(line.gpuHours), percent(line.gpuEfficiency), hours(line.cpuHours), percent(line.cpuEfficiency),
            hours(line.memoryGibHours)]


def half_life_text(seconds: float) -> str:
    """``7 days``, ``12 hours``, ``90 minutes``, ``45 s``."""
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0 or seconds >= 10 * size:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _recent(line: UsageLine, by: str) -> str:
    """The RECENT cell: decayed GPU-hours, and by VC the part on borrowed GPUs."""
    text = hours(line.recentGpuHours or 0.0)
    if by == "vc" and line.recentBorrowedGpuHours:
        text += f" ({hours(line.recentBorrowedGpuHours)} borrowed)"
    return text


def usage_table(report: UsageReport) -> str:
    """The report's period, one row per line, and the total; with fair share on, each
    line's recent GPU-hours (RECENT) and a footnote with the half-life."""
    period = f"usage from {render.when(report.since)} to {render.when(report.until)} (by {report.by})"
    if not report.lines:
        return f"{period}\nnothing ran in this period"
    recent = report.fairShareHalfLifeSeconds is not None
    extra = ["RECENT"] if recent else []

    def more(line: UsageLine) -> list[str]:
        return [_recent(line, report.by)] if recent else []

    if report.by == "job":
        rows = [[line.name, line.jobName, line.user, line.vc, *_figures(line), *more(line)] for line in report.lines]
        rows.append(["TOTAL", "", "", "", *_figures(report.total), *more(report.total)])
        text = f"{period}\n{render.table(JOB_HEADERS + extra, rows)}"
    else:
        rows = [[line.name, str(line.jobs), *_figures(line), *more(line)] for line in report.lines]
        rows.append(["TOTAL", str(report.total.jobs), *_figures(report.total), *more(report.total)])
        text = f"{period}\n{render.table(HEADERS + extra, rows)}"
    if report.fairShareHalfLifeSeconds is not None:
        text += (f"\nRECENT: GPU-hours of every run, decayed with a half-life of "
                 f"{half_life_text(report.fairShareHalfLifeSeconds)}: fair share runs the jobs of users (and, on "
                 "borrowed GPUs, of VCs) with less of it first")
    return text


def cmd_usage(client: Client, args: argparse.Namespace) -> int:
    until = args.until or datetime.now(UTC)
    if args.since is not None and args.since >= until:
        print(f"yard: --since ({args.since.isoformat()}) must be before --until ({until.isoformat()})",
              file=sys.stderr)
        return EXIT_USAGE
    by: UsageGrouping = args.by or ("group" if args.group else "vc" if args.vc else "user")
    report = client.usage(by=by, since=args.since, until=args.until, user=args.user, vc=args.vc, group=args.group)
    render.print_json(report) if args.json else print(usage_table(report))
    return 0


def efficiency_line(line: UsageLine) -> str:
    """What an ended job held and how much of it it used, in one line."""
    return (
        f"Efficiency: GPU {percent(line.gpuEfficiency)} of {hours(line.gpuHours)} GPU-hours; "
        f"CPU {percent(line.cpuEfficiency)} of {hours(line.cpuHours)} core-hours; "
        f"memory {hours(line.memoryGibHours)} GiB-hours held"
    )


def job_efficiency(client: Client, job: JobDetail) -> str | None:
    """The efficiency line of an ended job that ran; None for one that never started."""
    if job.startedAt is None or job.finishedAt is None:
        return None
    answer = client._usage_answer(by="job", since=job.submittedAt, until=job.finishedAt + timedelta(seconds=1),
                                  job=job.id)  # as `client.usage(by="job", job=..., since=..., until=...)` asks
    report: UsageReport = plain.read_or_parse(client, "usage.UsageReport", answer)
    return efficiency_line(report.lines[0]) if report.lines else None
