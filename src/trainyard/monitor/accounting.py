"""Usage accounting: GPU-, CPU- and memory-hours allocated over a period, and how much of
what was allocated was used (``seff``'s efficiency), per job, user, virtual cluster or group.

Maths over facts read from the store (``store/queries/usage.py``), so the same store gives
the same answer whenever it is asked, across server restarts.

The rules, in order:

1. **Allocated.** A task holds its GPUs (the milli-shares of ``TaskRow.gpus``), CPUs and
   memory from its ``started_at`` to its ``finished_at`` (still running: to ``now``). That
   run is clipped to the period ``[since, until)``; hours allocated = amount x clipped
   seconds / 3600. Each attempt of a job is its own task runs, so a preempted job's
   attempts add up. Memory is counted in GiB-hours (``memory_mb`` / 1024 x hours).
2. **Used.** Each monitoring row (``task_samples``) says what its task used over a span:
   a downsampled row (``step`` > 0) covers ``[at, at + step)``; a raw row (``step`` 0)
   covers from ``at`` to its task's next row, at most ``raw_span`` seconds (the sampling
   interval and a little: a gap longer than that is time nobody measured, e.g. the server
   was down). Every span is cut where the task's next row starts (no second is counted
   twice where raw and downsampled rows meet) and clipped to the period and to the run.
   (Rows taken at the same moment: the finest is the one that counts.) GPU-hours used =
   sum of ``gpu_util_pct``/100 x ``gpus_held`` x span. The database does these sums
   (``store/queries/usage.measured_use``): a month of history is millions of rows, too many
   to bring into Python. Each complete UTC day is summed once per task and kept
   (``services/usage_days.py``): a report adds those for the whole days in its period and
   sums rows only for the rest, which gives the same figures since the sums are additive.
3. **Efficiency** = used / allocated *over the measured spans* (rows whose figure is
   known): time nobody measured is neither idle nor busy. GPU efficiency is ``None``
   ("n/a") when no GPU figure was measured at all — simulated GPUs report none, and none is
   invented. CPU efficiency is CPU cores used / cores allocated, the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from trainyard.store.queries.usage import MeasuredRow

SECONDS_PER_HOUR = 3600.0
MIB_PER_GIB = 1024.0
NO_GROUP = "(no group)"  # the line, in a report by group, of users who belong to none


class UsageBy(StrEnum):
    """What one line of a usage report adds up."""

    USER = "user"
    VC = "vc"
    GROUP = "group"
    JOB = "job"


@dataclass(frozen=True)
class TaskRun:
    """One task of one attempt, as allocated: who, where, how much, from when to when."""

    job_id: int
    job_name: str
    user: str
    vc: str
    attempt: int
    role: str
    index: int
    gpu_milli: int  # the sum of its GPU shares (1000 = one whole GPU)
    cpu_milli: int
    memory_mb: int
    started_at: datetime
    finished_at: datetime | None  # None: still running
    borrowed: bool = False  # its attempt ran on borrowed GPUs (over its VC's quota)

    @property
    def key(self) -> tuple[int, int, str, int]:
        return (self.job_id, self.attempt, self.role, self.index)


@dataclass
class Usage:
    """Sums over some task runs; the hours are allocated, ``*_used`` measured."""

    jobs: set[int] = field(default_factory=set)
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    memory_gib_hours: float = 0.0
    gpu_hours_used: float = 0.0
    gpu_hours_measured: float = 0.0  # allocated GPU-hours that a known utilisation covers
    cpu_hours_used: float = 0.0
    cpu_hours_measured: float = 0.0

    @property
    def gpu_efficiency(self) -> float | None:
        """GPU-hours used / allocated over the measured time; None when nothing was measured."""
        return self.gpu_hours_used / self.gpu_hours_measured if self.gpu_hours_measured > 0 else None

    @property
    def cpu_efficiency(self) -> float | None:
        return self.cpu_hours_used / self.cpu_hours_measured if self.cpu_hours_measured > 0 else None

    def add(self, other: Usage) -> None:
        self.jobs |= other.jobs
        self.gpu_hours += other.gpu_hours
        self.cpu_hours += other.cpu_hours
        self.memory_gib_hours += other.memory_gib_hours
        self.gpu_hours_used += other.gpu_hours_used
        self.gpu_hours_measured += other.gpu_hours_measured
        self.cpu_hours_used += other.cpu_hours_used
        self.cpu_hours_measured += other.cpu_hours_measured


@dataclass(frozen=True)
class Period:
    """``[since, until)``, and the moment the report is made (a running task counts up to it)."""

    since: datetime
    until: datetime
    now: datetime

    def clip(self, start: datetime, end: datetime | None) -> float:
        """Seconds of ``[start, end)`` (``end`` None: up to now) inside the period."""
        stop = min(end if end is not None else self.now, self.until, self.now)
        return max(0.0, (stop - max(start, self.since)).total_seconds())


def allocated(run: TaskRun, period: Period) -> Usage:
    """What one task run held during the period (rule 1)."""
    hours = period.clip(run.started_at, run.finished_at) / SECONDS_PER_HOUR
    return Usage(
        jobs={run.job_id} if hours > 0 else set(),
        gpu_hours=run.gpu_milli / 1000 * hours,
        cpu_hours=run.cpu_milli / 1000 * hours,
        memory_gib_hours=run.memory_mb / MIB_PER_GIB * hours,
    )


def measured(run: TaskRun, use: MeasuredRow) -> Usage:
    """What one task run was measured to use during the period (rules 2 and 3), from the
    sums the database made of its monitoring rows."""
    return Usage(
        gpu_hours_used=use.gpu_seconds_used / SECONDS_PER_HOUR,
        gpu_hours_measured=use.gpu_seconds_measured / SECONDS_PER_HOUR,
        cpu_hours_used=use.cpu_core_seconds_used / SECONDS_PER_HOUR,
        cpu_hours_measured=run.cpu_milli / 1000 * use.cpu_seconds_measured / SECONDS_PER_HOUR,
    )


def line_names(run: TaskRun, by: UsageBy, groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The lines a run counts in: its job, user or VC; each of its user's groups."""
    if by is UsageBy.JOB:
        return [str(run.job_id)]
    if by is UsageBy.USER:
        return [run.user]
    if by is UsageBy.VC:
        return [run.vc]
    return list(groups.get(run.user) or [NO_GROUP])


def run_usages(
    runs: Iterable[TaskRun], measurements: Iterable[MeasuredRow], period: Period
) -> list[tuple[TaskRun, Usage]]:
    """Each run that held something in the period, with its usage (allocated and measured)."""
    by_task = {(m.job_id, m.attempt, m.role, m.index): m for m in measurements}
    usages = []
    for run in runs:
        usage = allocated(run, period)
        if usage.jobs:
            if (use := by_task.get(run.key)) is not None:
                usage.add(measured(run, use))
            usages.append((run, usage))
    return usages


def usage_by(
    usages: Iterable[tuple[TaskRun, Usage]], by: UsageBy, groups: Mapping[str, Sequence[str]]
) -> dict[str, Usage]:
    """Usage per line (job id, user, VC or group name); a user in two groups counts in both."""
    lines: dict[str, Usage] = {}
    for run, usage in usages:
        for name in line_names(run, by, groups):
            lines.setdefault(name, Usage()).add(usage)
    return lines


def total(usages: Iterable[tuple[TaskRun, Usage]]) -> Usage:
    """Every run once."""
    overall = Usage()
    for _, usage in usages:
        overall.add(usage)
    return overall
