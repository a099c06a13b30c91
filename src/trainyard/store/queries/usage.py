"""Queries behind usage accounting: the task runs that overlap a period (with their job's
id, name, user and VC), what those tasks' monitoring rows add up to, the daily totals of
those sums (``task_usage_days``, for the closed days), and who belongs to which group.

``monitor/accounting.py`` owns what these facts add up to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Float, case, cast, delete, extract, func, insert, select
from sqlalchemy.orm import Session

from trainyard.store.rows import (
    AttemptRow,
    GroupRow,
    JobRow,
    MembershipRow,
    TaskRow,
    TaskSampleRow,
    TaskUsageDayRow,
    UsageDayRow,
    UserRow,
)

IN_CHUNK = 500  # ids per ``IN (...)``: well under every database's limit on parameters


@dataclass(frozen=True)
class TaskRunRow:
    """A task row with what accounting needs of its attempt, job and user."""

    task: TaskRow
    attempt: int
    job_name: str
    user: str
    vc: str
    borrowed: bool = False  # its attempt ran over its VC's quota, on borrowed GPUs


def task_runs(
    session: Session,
    since: datetime,
    until: datetime,
    *,
    user: str | None = None,
    vc: str | None = None,
    job_id: int | None = None,
) -> list[TaskRunRow]:
    """Every task that started before ``until`` and had not finished by ``since`` (running
    ones included), optionally of one user, VC or job; by job, attempt, role and index."""
    query = (
        select(TaskRow, AttemptRow.number, JobRow.name, UserRow.name, JobRow.vc, AttemptRow.borrowed)
        .join(AttemptRow, AttemptRow.id == TaskRow.attempt_id)
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .where(TaskRow.started_at.is_not(None), TaskRow.started_at < until)
        .where(TaskRow.finished_at.is_(None) | (TaskRow.finished_at > since))
        .order_by(TaskRow.job_id, AttemptRow.number, TaskRow.role, TaskRow.index)
    )
    if user is not None:
        query = query.where(UserRow.name == user)
    if vc is not None:
        query = query.where(JobRow.vc == vc)
    if job_id is not None:
        query = query.where(JobRow.id == job_id)
    return [TaskRunRow(task, number, name, owner, job_vc, bool(borrowed))
            for task, number, name, owner, job_vc, borrowed in session.execute(query)]


FAR_FUTURE = 1e12  # seconds since the epoch beyond any real moment: "no end"


@dataclass(frozen=True)
class MeasuredRow:
    """One task's monitoring over a period, summed (see ``measured_use``)."""

    job_id: int
    attempt: int
    role: str
    index: int
    gpu_seconds_used: float  # sum of utilisation x GPUs held x seconds
    gpu_seconds_measured: float  # sum of GPUs held x seconds, where utilisation was measured
    cpu_core_seconds_used: float  # sum of cores busy x seconds
    cpu_seconds_measured: float  # seconds where CPU use was measured


def _epoch_seconds(session: Session, column: Any) -> ColumnElement[float]:
    """A stored UTC time as seconds since the epoch, in SQL. SQLite keeps times as text, which
    its ``julianday`` reads; PostgreSQL extracts the epoch."""
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(column) - 2440587.5) * 86400.0
    return cast(extract("epoch", column), Float)


def measured_use(
    session: Session,
    job_ids: Collection[int],
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    raw_span_seconds: float,
    reach_seconds: float,
) -> list[MeasuredRow]:
    """What the monitoring rows (``task_samples``) of these jobs' tasks say they used in
    ``[since, until)``, summed per task in the database (a month of history is millions of
    rows). The rule, which ``monitor/accounting.py`` documents:

    - a downsampled row (``step`` > 0) stands for ``[at, at + step)``; a raw row (``step`` 0)
      for ``[at, at + raw_span_seconds)``;
    - either is cut where its task's next row starts, so no second counts twice (rows taken
      at the same moment are ordered coarsest first: the finest one is the one that counts,
      the same in every query, so that a period summed in pieces gives what it gives whole);
    - and clipped to the period, to now, and to its task's run (``started_at`` to
      ``finished_at``).

    Rows taken up to ``reach_seconds`` before ``since`` are read, as they may reach into it.
    """
    dialect = session.get_bind().dialect.name
    reach = timedelta(seconds=reach_seconds)
    earliest = datetime.min.replace(tzinfo=UTC)
    reach_from = since - reach if since - earliest > reach else earliest
    biggest, smallest = (func.max, func.min) if dialect == "sqlite" else (func.greatest, func.least)
    s = TaskSampleRow
    key = (s.job_id, s.attempt, s.role, s.index)
    at = _epoch_seconds(session, s.at)
    ids = sorted(set(job_ids))
    results: list[MeasuredRow] = []
    for first in range(0, len(ids), IN_CHUNK):
        rows = (
            select(*key, at.label("at"), s.step, s.gpus_held, s.gpu_util_pct, s.cpu_cores,
                   func.lead(at).over(partition_by=key, order_by=(s.at, s.step.desc(), s.id)).label("next_at"))
            .where(s.job_id.in_(ids[first:first + IN_CHUNK]),
                   s.at >= reach_from, s.at < until)
            .subquery()
        )
        run = (
            select(TaskRow.job_id, AttemptRow.number.label("attempt"), TaskRow.role, TaskRow.index,
                   _epoch_seconds(session, TaskRow.started_at).label("start"),
                   func.coalesce(_epoch_seconds(session, TaskRow.finished_at), FAR_FUTURE).label("end"))
            .join(AttemptRow, AttemptRow.id == TaskRow.attempt_id)
            .where(TaskRow.job_id.in_(ids[first:first + IN_CHUNK]), TaskRow.started_at.is_not(None))
            .subquery()
        )
        span = case((rows.c.step > 0, rows.c.step), else_=raw_span_seconds)
        low = biggest(rows.c.at, since.timestamp(), run.c.start)
        high = smallest(rows.c.at + span, func.coalesce(rows.c.next_at, FAR_FUTURE), until.timestamp(),
                        now.timestamp(), run.c.end)
        seconds = biggest(high - low, 0.0)
        gpu_known = rows.c.gpu_util_pct.is_not(None) & (rows.c.gpus_held > 0)
        cpu_known = rows.c.cpu_cores.is_not(None)
        query = (
            select(
                rows.c.job_id, rows.c.attempt, rows.c.role, rows.c.index,
                func.sum(case((gpu_known, rows.c.gpu_util_pct / 100.0 * rows.c.gpus_held * seconds), else_=0.0)),
                func.sum(case((gpu_known, rows.c.gpus_held * seconds), else_=0.0)),
                func.sum(case((cpu_known, rows.c.cpu_cores * seconds), else_=0.0)),
                func.sum(case((cpu_known, seconds), else_=0.0)),
            )
            .join(run, (run.c.job_id == rows.c.job_id) & (run.c.attempt == rows.c.attempt)
                  & (run.c.role == rows.c.role) & (run.c.index == rows.c.index))
            .group_by(rows.c.job_id, rows.c.attempt, rows.c.role, rows.c.index)
        )
        results.extend(MeasuredRow(job, attempt, role, index, float(gpu_used or 0), float(gpu_measured or 0),
                                   float(cpu_used or 0), float(cpu_measured or 0))
                       for job, attempt, role, index, gpu_used, gpu_measured, cpu_used, cpu_measured
                       in session.execute(query))
    return results


def longest_row_seconds(session: Session) -> int:
    """The longest step of any stored monitoring row: no row reaches further past its ``at``
    (a raw row's span is the caller's to add). Read from the (step, at) index's end."""
    return int(session.scalar(select(func.max(TaskSampleRow.step))) or 0)


# --- Daily totals ---------------------------------------------------------------------------


def closed_days(session: Session, first: date, last: date) -> list[date]:
    """The closed days from ``first`` to ``last`` (both included), in order."""
    query = select(UsageDayRow.day).where(UsageDayRow.day >= first, UsageDayRow.day <= last).order_by(UsageDayRow.day)
    return list(session.scalars(query))


def newest_closed_day(session: Session) -> date | None:
    return session.scalar(select(func.max(UsageDayRow.day)))


def day_totals(session: Session, job_ids: Collection[int], first: date, last: date) -> list[MeasuredRow]:
    """The daily totals of these jobs' tasks summed over the closed days from ``first`` to
    ``last`` (both included): one row per task that has any."""
    t = TaskUsageDayRow
    ids = sorted(set(job_ids))
    results: list[MeasuredRow] = []
    for start in range(0, len(ids), IN_CHUNK):
        query = (
            select(t.job_id, t.attempt, t.role, t.index, func.sum(t.gpu_seconds_used), func.sum(t.gpu_seconds_measured),
                   func.sum(t.cpu_core_seconds_used), func.sum(t.cpu_seconds_measured))
            .where(t.job_id.in_(ids[start:start + IN_CHUNK]), t.day >= first, t.day <= last)
            .group_by(t.job_id, t.attempt, t.role, t.index)
        )
        results.extend(MeasuredRow(job, attempt, role, index, float(gpu_used), float(gpu_measured),
                                   float(cpu_used), float(cpu_measured))
                       for job, attempt, role, index, gpu_used, gpu_measured, cpu_used, cpu_measured
                       in session.execute(query))
    return results


def add_closed_day(session: Session, day: date, totals: Collection[MeasuredRow], closed_at: datetime) -> None:
    """Close ``day`` with its tasks' totals, in the caller's transaction: the day's row is its
    primary key, so a second attempt to close it fails rather than counting it twice."""
    session.add(UsageDayRow(day=day, closed_at=closed_at, tasks=len(totals)))
    session.flush()
    if totals:
        session.execute(insert(TaskUsageDayRow), [
            {"day": day, "job_id": m.job_id, "attempt": m.attempt, "role": m.role, "index": m.index,
             "gpu_seconds_used": m.gpu_seconds_used, "gpu_seconds_measured": m.gpu_seconds_measured,
             "cpu_core_seconds_used": m.cpu_core_seconds_used, "cpu_seconds_measured": m.cpu_seconds_measured}
            for m in totals
        ])


def delete_days_before(session: Session, day: date) -> int:
    """Remove the closed days (and their totals) before ``day``; how many days went."""
    session.execute(delete(TaskUsageDayRow).where(TaskUsageDayRow.day < day))
    result = session.execute(delete(UsageDayRow).where(UsageDayRow.day < day))
    return int(getattr(result, "rowcount", 0) or 0)


def groups_of_users(session: Session) -> dict[str, list[str]]:
    """Each user's group names, by user name (users in no group are left out)."""
    query = (
        select(UserRow.name, GroupRow.name)
        .join(MembershipRow, MembershipRow.user_id == UserRow.id)
        .join(GroupRow, GroupRow.id == MembershipRow.group_id)
        .order_by(UserRow.name, GroupRow.name)
    )
    groups: dict[str, list[str]] = defaultdict(list)
    for user, group in session.execute(query):
        groups[user].append(group)
    return dict(groups)


def members_of(session: Session, group: str) -> list[str]:
    """The user names in one group."""
    query = (
        select(UserRow.name)
        .join(MembershipRow, MembershipRow.user_id == UserRow.id)
        .join(GroupRow, GroupRow.id == MembershipRow.group_id)
        .where(GroupRow.name == group)
    )
    return list(session.scalars(query))
