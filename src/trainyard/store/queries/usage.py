"""Queries behind usage accounting: the task runs that overlap a period (with their job's
id, name, user and VC), the monitoring rows of those tasks, and who belongs to which group.

``monitor/accounting.py`` owns what these facts add up to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from trainyard.store.rows import AttemptRow, GroupRow, JobRow, MembershipRow, TaskRow, TaskSampleRow, UserRow

IN_CHUNK = 500  # ids per ``IN (...)``: well under every database's limit on parameters


@dataclass(frozen=True)
class TaskRunRow:
    """A task row with what accounting needs of its attempt, job and user."""

    task: TaskRow
    attempt: int
    job_name: str
    user: str
    vc: str


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
        select(TaskRow, AttemptRow.number, JobRow.name, UserRow.name, JobRow.vc)
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
    return [TaskRunRow(task, number, name, owner, job_vc)
            for task, number, name, owner, job_vc in session.execute(query)]


SampleFigures = Row[int, int, str, int, datetime, int, float, float | None, float | None]


def task_samples_of(
    session: Session, job_ids: Collection[int], since: datetime, until: datetime
) -> list[SampleFigures]:
    """What accounting reads of the monitoring rows (raw and downsampled) of these jobs'
    tasks taken in ``[since, until)``: (job id, attempt, role, index, at, step, GPUs held,
    GPU utilisation %, CPU cores), in time order. Plain rows, not ORM objects: a month of
    history is millions of them. A caller that wants rows reaching into the period from
    before it passes an earlier ``since``."""
    ids = sorted(set(job_ids))
    columns = (TaskSampleRow.job_id, TaskSampleRow.attempt, TaskSampleRow.role, TaskSampleRow.index,
               TaskSampleRow.at, TaskSampleRow.step, TaskSampleRow.gpus_held, TaskSampleRow.gpu_util_pct,
               TaskSampleRow.cpu_cores)
    rows: list[SampleFigures] = []
    for start in range(0, len(ids), IN_CHUNK):
        query = select(*columns).where(
            TaskSampleRow.job_id.in_(ids[start:start + IN_CHUNK]), TaskSampleRow.at >= since, TaskSampleRow.at < until
        )
        rows.extend(session.execute(query))
    rows.sort(key=lambda r: r[4])
    return rows


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
