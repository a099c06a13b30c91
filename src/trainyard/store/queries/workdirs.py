"""Queries about uploaded working directories (``core.workdirs``) and the jobs that run in them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, func, or_, select
from sqlalchemy.orm import Session

from trainyard.core.states import FINAL_JOB_STATES
from trainyard.store.rows import JobRow, WorkdirRow


def owned(session: Session, owner_id: int, digest: str) -> WorkdirRow | None:
    """The owner's upload of this content, if they made one."""
    return session.scalar(select(WorkdirRow).where(WorkdirRow.owner_id == owner_id, WorkdirRow.digest == digest))


def by_digest(session: Session, digest: str) -> WorkdirRow | None:
    """Any owner's upload of this content (what it holds is the same for all)."""
    return session.scalar(select(WorkdirRow).where(WorkdirRow.digest == digest).limit(1))


def forget_unused(session: Session, before: datetime, *, ended_before: datetime) -> int:
    """Delete the uploads made before ``before`` that no job of their owner runs in (waits,
    runs, or ended after ``ended_before``); how many."""
    in_use = or_(JobRow.state.not_in([str(s) for s in FINAL_JOB_STATES]), JobRow.finished_at >= ended_before)
    used = exists().where(JobRow.workdir == WorkdirRow.digest, JobRow.user_id == WorkdirRow.owner_id, in_use)
    result = session.execute(delete(WorkdirRow).where(WorkdirRow.created_at < before, ~used)
                             .execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


def digests_in_use(session: Session) -> set[str]:
    """Every content some owner's upload still holds: what the archive store keeps."""
    return set(session.scalars(select(WorkdirRow.digest).distinct()))


def bytes_held(session: Session, owner_id: int) -> int:
    """What one owner's uploads hold together."""
    return int(session.scalar(select(func.coalesce(func.sum(WorkdirRow.size_bytes), 0))
                              .where(WorkdirRow.owner_id == owner_id)) or 0)
