"""Job notices (``rows.JobNoticeRow``): queued with the event they tell of, read by the
alert tick, and a job's own for its page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core import notices
from trainyard.store.rows import JobEventRow, JobNoticeRow, JobRow, UserRow

PENDING, SENT, FAILED = "pending", "sent", "failed"
EMAIL, WEBHOOK = "email", "webhook"


def effective_notify(job_spec: dict[str, Any], default: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the job's owner asked for it: the job file's ``notify`` over their account's
    default (a job's ``email``/``webhook`` left out are the default's); None: nothing."""
    own = job_spec.get("notify")
    base = default or {}
    if own is None:
        return base or None
    return {"on": list(own.get("on") or []),
            "email": own.get("email", base.get("email", True)),
            "webhook": own.get("webhook") or base.get("webhook")}


def queue(session: Session, job_id: int, event: JobEventRow, at: datetime) -> None:
    """Queue the notices ``event`` calls for, in the caller's transaction."""
    if notices.notice_class(event.kind, held=False) is None:  # most events: nothing to read
        return
    job = session.get(JobRow, job_id)
    if job is None:
        return
    owner = session.get(UserRow, job.user_id)
    asked = effective_notify(job.spec or {}, owner.notify if owner is not None else None)
    if not asked:
        return
    kind = notices.wanted(asked.get("on") or [], event.kind, held=job.held_by is not None)
    if kind is None:
        return
    if asked.get("email"):
        session.add(JobNoticeRow(job_id=job_id, event=event, kind=kind, channel=EMAIL, target="",
                                 state=PENDING, tries=0, created_at=at))
    if asked.get("webhook"):
        session.add(JobNoticeRow(job_id=job_id, event=event, kind=kind, channel=WEBHOOK,
                                 target=str(asked["webhook"]), state=PENDING, tries=0, created_at=at))


def pending(session: Session, limit: int = 200) -> list[JobNoticeRow]:
    return list(session.scalars(
        select(JobNoticeRow).where(JobNoticeRow.state == PENDING).order_by(JobNoticeRow.id).limit(limit)))


def notice_by_id(session: Session, notice_id: int) -> JobNoticeRow | None:
    return session.get(JobNoticeRow, notice_id)


def job_notices(session: Session, job_id: int) -> list[JobNoticeRow]:
    return list(session.scalars(select(JobNoticeRow).where(JobNoticeRow.job_id == job_id).order_by(JobNoticeRow.id)))
