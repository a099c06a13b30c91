"""Queries of alerts: the admins' rule settings, the alerts themselves, and the facts the
rules judge (running jobs with their GPUs, their tasks' utilisation over a window, waiting
jobs). ``monitor/alerts.py`` owns what the rules mean; ``services/alerts.py`` joins them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.core.states import JobState, TaskState
from trainyard.store.queries.jobs import queued
from trainyard.store.rows import AlertRow, AlertRuleRow, JobRow, TaskRow, TaskSampleRow, UserRow

FIRING = "firing"
RESOLVED = "resolved"
MAX_LISTED = 500


def rule_rows(session: Session) -> dict[str, AlertRuleRow]:
    return {r.name: r for r in session.scalars(select(AlertRuleRow))}


def rule_row(session: Session, name: str) -> AlertRuleRow | None:
    return session.get(AlertRuleRow, name)


def firing_alerts(session: Session) -> list[AlertRow]:
    return list(session.scalars(select(AlertRow).where(AlertRow.state == FIRING).order_by(AlertRow.id)))


def alert_by_id(session: Session, alert_id: int) -> AlertRow | None:
    return session.get(AlertRow, alert_id)


def recent_alerts(session: Session) -> list[AlertRow]:
    """The newest alerts (firing or resolved): those a receiver may not have heard of yet."""
    return list(session.scalars(
        select(AlertRow).order_by(AlertRow.id.desc()).limit(MAX_LISTED)
    ))


def listed_alerts(session: Session, *, include_resolved: bool, user_id: int | None) -> list[AlertRow]:
    """Alerts newest first; ``user_id``: only about that user's jobs."""
    query = select(AlertRow).order_by(AlertRow.id.desc()).limit(MAX_LISTED)
    if not include_resolved:
        query = query.where(AlertRow.state == FIRING)
    if user_id is not None:
        query = query.join(JobRow, JobRow.id == AlertRow.job_id).where(JobRow.user_id == user_id)
    return list(session.scalars(query))


def running_jobs_with_gpus(session: Session) -> list[tuple[int, str, str, datetime, float]]:
    """Running jobs: (id, owner, VC, started at, GPUs their unfinished tasks hold)."""
    rows = session.execute(
        select(JobRow.id, UserRow.name, JobRow.vc, JobRow.started_at, TaskRow.gpus)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(TaskRow, TaskRow.job_id == JobRow.id)
        .where(JobRow.state == JobState.RUNNING, TaskRow.state.in_((TaskState.WAITING, TaskState.RUNNING)))
    )
    jobs: dict[int, list[Any]] = {}
    for job_id, user, vc, started_at, gpus in rows:
        if started_at is None:
            continue
        entry = jobs.setdefault(job_id, [job_id, user, vc, started_at, 0.0])
        entry[4] += sum(milli for _, milli in gpus) / 1000
    return [(j[0], j[1], j[2], j[3], j[4]) for j in jobs.values()]


def mean_gpu_util(session: Session, job_ids: Sequence[int], since: datetime) -> dict[int, float]:
    """Each job's mean measured GPU utilisation (percent) over raw samples since ``since``,
    weighting each sample by the GPUs its task held; jobs with no measured sample are absent."""
    if not job_ids:
        return {}
    weighted = func.sum(TaskSampleRow.gpu_util_pct * TaskSampleRow.gpus_held)
    rows = session.execute(
        select(TaskSampleRow.job_id, weighted, func.sum(TaskSampleRow.gpus_held))
        .where(TaskSampleRow.job_id.in_(job_ids), TaskSampleRow.step == 0, TaskSampleRow.at >= since,
               TaskSampleRow.gpu_util_pct.is_not(None), TaskSampleRow.gpus_held > 0)
        .group_by(TaskSampleRow.job_id)
    )
    return {job_id: float(total or 0) / float(held) for job_id, total, held in rows if held}


def waiting_jobs(session: Session, before: datetime) -> list[tuple[int, str, str, datetime, str]]:
    """Jobs waiting since before ``before``: (id, owner, VC, submitted at, pending reason in words).
    A requeued job's wait is counted from its submission too (its waits are one queue time)."""
    rows = session.execute(
        select(JobRow.id, UserRow.name, JobRow.vc, JobRow.submitted_at,
               func.coalesce(JobRow.pending_message, JobRow.pending_short, ""))
        .join(UserRow, UserRow.id == JobRow.user_id)
        .where(queued(), JobRow.submitted_at < before)
        .order_by(JobRow.id)
    )
    return [tuple(r) for r in rows]  # type: ignore[misc]
