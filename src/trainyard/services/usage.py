"""Usage accounting behind ``GET /usage`` and ``yard usage``: who may see what, the period,
and the report (``monitor/accounting.py`` does the sums; ``services/usage_days.py`` reads
the measured use from the daily totals and the monitoring rows).

Fair share: each line also says its *recent* GPU-hours, decayed to the report's end (now,
for a report up to now) with
the scheduler's half-life (``scheduler.fairshare.run_usage``, the measure the scheduler orders
users by), over every task run of the last ``RECENT_HALF_LIVES`` half-lives, whatever the
report's period; and, by VC, the part of it on borrowed GPUs. In a report up to now, a line
with recent usage and nothing in the period is shown too, with zero hours.

Permissions: an admin sees everyone's usage. Anyone else sees only their own jobs: every
line of their report (by job, VC or group as well as by user) adds up their own jobs alone,
and asking for another user's usage is refused (403) rather than quietly answered with
nothing, so that an empty report never hides a permission problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from trainyard.monitor.accounting import (
    SECONDS_PER_HOUR,
    Period,
    TaskRun,
    Usage,
    UsageBy,
    line_names,
    run_usages,
    total,
    usage_by,
)
from trainyard.scheduler.fairshare import run_usage
from trainyard.schemas.usage import UsageGrouping, UsageLine, UsageReport
from trainyard.services import usage_days
from trainyard.services.errors import Forbidden, Invalid, NotFound
from trainyard.store.queries import usage as usage_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.queries.usage import TaskRunRow
from trainyard.store.rows import UserRow

DEFAULT_PERIOD = timedelta(days=7)  # `since` when not given: a week before `until`
# How far back fair share's recent usage reads: a run that ended this many half-lives ago
# weighs 2^-10 (the controller's tally reads as far: ``controller.fairshare``).
RECENT_HALF_LIVES = 10


def _utc(moment: datetime) -> datetime:
    """A moment given without a zone is read as UTC, as every time in Trainyard is."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def earlier(moment: datetime, by: timedelta) -> datetime:
    """``moment - by``, or the first moment there is when that would be before it."""
    first = datetime.min.replace(tzinfo=UTC)
    return moment - by if moment - first > by else first


def period_of(since: datetime | None, until: datetime | None, now: datetime) -> Period:
    """``[since, until)``: until defaults to now, since to a week before until."""
    end = _utc(until) if until is not None else now
    start = _utc(since) if since is not None else earlier(end, DEFAULT_PERIOD)
    if start >= end:
        raise Invalid(
            f"the period is empty: since ({start.isoformat()}) must be before until ({end.isoformat()})",
            details=[{"path": "since", "message": "must be before until"}],
        )
    return Period(start, end, now)


def task_run(row: TaskRunRow) -> TaskRun:
    task = row.task
    assert task.started_at is not None  # the query asks for started tasks only
    return TaskRun(
        job_id=task.job_id, job_name=row.job_name, user=row.user, vc=row.vc, attempt=row.attempt,
        role=task.role, index=task.index, gpu_milli=sum(milli for _, milli in task.gpus),
        cpu_milli=task.cpu_milli, memory_mb=task.memory_mb, started_at=task.started_at,
        finished_at=task.finished_at, borrowed=row.borrowed,
    )


def _check_filters(session: Session, caller: UserRow, user: str | None, group: str | None) -> str | None:
    """The user whose jobs are counted (None: everyone's), after refusing what the caller
    may not ask and naming what does not exist."""
    # Refused before looked up: a non-admin learns nothing of which other users exist.
    if not caller.is_admin and user is not None and user != caller.name:
        raise Forbidden(f"only an admin sees another user's usage; you are {caller.name}",
                        details=[{"path": "user", "message": "not you"}])
    if user is not None and user_queries.user_named(session, user) is None:
        raise NotFound(f"no user named {user!r}", details=[{"path": "user", "message": "no such user"}])
    if group is not None and vc_queries.group_named(session, group) is None:
        raise NotFound(f"no group named {group!r}", details=[{"path": "group", "message": "no such group"}])
    return user if caller.is_admin else caller.name


def _line(name: str, usage: Usage) -> UsageLine:
    measured_gpu = usage.gpu_hours_measured > 0
    return UsageLine(
        name=name, jobs=len(usage.jobs), gpuHours=usage.gpu_hours,
        gpuHoursUsed=usage.gpu_hours_used if measured_gpu else None, gpuEfficiency=usage.gpu_efficiency,
        cpuHours=usage.cpu_hours, cpuEfficiency=usage.cpu_efficiency, memoryGibHours=usage.memory_gib_hours,
    )


def usage_report(
    session: Session,
    caller: UserRow,
    *,
    by: UsageGrouping,
    period: Period,
    monitor_interval_seconds: float,
    user: str | None = None,
    vc: str | None = None,
    group: str | None = None,
    job_id: int | None = None,
    fair_share_half_life: float = 0.0,
) -> UsageReport:
    """Allocated and used hours per ``by`` line over the period, of the jobs the caller may
    see, narrowed to one user, VC, group (its members' jobs) or job; with each line's recent
    GPU-hours for fair share when ``fair_share_half_life`` (seconds) is set."""
    grouping = UsageBy(by)
    owner = _check_filters(session, caller, user, group)
    members = set(usage_queries.members_of(session, group)) if group is not None else None

    def load(since: datetime, until: datetime) -> list[TaskRun]:
        rows = usage_queries.task_runs(session, since, until, user=owner, vc=vc, job_id=job_id)
        return [task_run(r) for r in rows if members is None or r.user in members]

    runs = load(period.since, period.until)
    measurements = usage_days.measured_in(session, {r.job_id for r in runs}, period, monitor_interval_seconds)
    usages = run_usages(runs, measurements, period)
    groups = usage_queries.groups_of_users(session) if grouping is UsageBy.GROUP else {}
    lines = usage_by(usages, grouping, groups)
    if grouping is UsageBy.GROUP and group is not None:
        lines = {name: usage for name, usage in lines.items() if name == group}
    recent: dict[str, tuple[float, float]] = {}
    recent_total = (0.0, 0.0)
    if fair_share_half_life > 0:
        # As of the report's end: now for a report up to now, and a past period's figures do
        # not change as time goes by.
        moment = min(period.until, period.now)
        since = earlier(moment, timedelta(seconds=fair_share_half_life * RECENT_HALF_LIVES))
        covered = period.since <= since and period.until >= moment
        recent_runs = runs if covered else load(since, moment)
        recent, recent_total = recent_usage(recent_runs, grouping, groups, moment, fair_share_half_life)
        if grouping is not UsageBy.JOB and period.until >= period.now:  # recent users idle in the period
            lines.update((name, Usage()) for name in recent if name not in lines)
        if grouping is UsageBy.GROUP and group is not None:
            lines = {name: usage for name, usage in lines.items() if name == group}
    jobs = {r.job_id: r for r in runs}
    report_lines = []
    for name, usage in sorted(lines.items(), key=lambda item: _line_order(grouping, *item)):
        line = _with_recent(_line(name, usage), recent.get(name, (0.0, 0.0)), fair_share_half_life)
        if grouping is UsageBy.JOB:
            run = jobs[int(name)]
            line = line.model_copy(update={"jobName": run.job_name, "user": run.user, "vc": run.vc})
        report_lines.append(line)
    return UsageReport(by=by, since=period.since, until=period.until, lines=report_lines,
                       total=_with_recent(_line("total", total(usages)), recent_total, fair_share_half_life),
                       fairShareHalfLifeSeconds=fair_share_half_life if fair_share_half_life > 0 else None)


def recent_usage(
    runs: list[TaskRun], by: UsageBy, groups: Mapping[str, Sequence[str]], now: datetime, half_life: float
) -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Recent GPU-hours per line and over every run once, each as (all, on borrowed GPUs):
    the GPU-seconds of each run decayed to ``now`` (``fairshare.run_usage``), in hours."""
    lines: dict[str, tuple[float, float]] = {}
    overall = (0.0, 0.0)
    at = now.timestamp()
    for run in runs:
        end = run.finished_at.timestamp() if run.finished_at is not None else at
        hours = run_usage(run.gpu_milli / 1000, run.started_at.timestamp(), end, at, half_life) / SECONDS_PER_HOUR
        if hours <= 0:
            continue
        borrowed = hours if run.borrowed else 0.0
        overall = (overall[0] + hours, overall[1] + borrowed)
        for name in line_names(run, by, groups):
            was = lines.get(name, (0.0, 0.0))
            lines[name] = (was[0] + hours, was[1] + borrowed)
    return lines, overall


def _with_recent(line: UsageLine, recent: tuple[float, float], half_life: float) -> UsageLine:
    if half_life <= 0:
        return line
    return line.model_copy(update={"recentGpuHours": recent[0], "recentBorrowedGpuHours": recent[1]})


def _line_order(by: UsageBy, name: str, usage: Usage) -> tuple[float, str]:
    """Jobs newest first; other lines by GPU-hours, most first, then by name."""
    return (-int(name), "") if by is UsageBy.JOB else (-usage.gpu_hours, name)
