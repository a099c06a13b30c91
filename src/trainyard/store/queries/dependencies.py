"""What the job file's ``dependencies`` need of the store: the jobs waited for, by id."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.store.queries.jobs import chunks
from trainyard.store.rows import JobRow


def job_states(session: Session, job_ids: Sequence[int]) -> dict[int, tuple[str, int]]:
    """Job id -> (state, owner's user id) of each of these jobs that exists."""
    found: dict[int, tuple[str, int]] = {}
    for chunk in chunks(sorted(set(job_ids))):
        query = select(JobRow.id, JobRow.state, JobRow.user_id).where(JobRow.id.in_(chunk))
        found.update((job_id, (state, user_id)) for job_id, state, user_id in session.execute(query))
    return found
