"""Queries about uploaded working directories (``core.workdirs``) and the jobs that run in them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from trainyard.store.rows import JobRow, WorkdirRow


def owned(session: Session, owner_id: int, digest: str) -> WorkdirRow | None:
    """The owner's upload of this content, if they made one."""
    return session.scalar(select(WorkdirRow).where(WorkdirRow.owner_id == owner_id, WorkdirRow.digest == digest))


def by_digest(session: Session, digest: str) -> WorkdirRow | None:
    """Any owner's upload of this content (what it holds is the same for all)."""
    return session.scalar(select(WorkdirRow).where(WorkdirRow.digest == digest).limit(1))


def forget_unused(session: Session, before: datetime) -> int:
    """Delete the uploads made before ``before`` that no job of their owner runs in; how many."""
    used = exists().where(JobRow.workdir == WorkdirRow.digest, JobRow.user_id == WorkdirRow.owner_id)
    result = session.execute(delete(WorkdirRow).where(WorkdirRow.created_at < before, ~used)
                             .execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


def digests_in_use(session: Session) -> set[str]:
    """Every content some owner's upload still holds: what the archive store keeps."""
    return set(session.scalars(select(WorkdirRow.digest).distinct()))
