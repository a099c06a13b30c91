"""Queries on sweeps the controller makes every cycle."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.states import FINAL_JOB_STATES
from trainyard.store.rows import JobRow, SweepMemberRow, SweepRow


def capped_members(session: Session) -> list[tuple[int, int, int, int, str]]:
    """(sweep id, its ``parallel``, member index, job id, job state) of every member not yet
    ended of a sweep that caps how many of its jobs run at once."""
    query = (
        select(SweepRow.id, SweepRow.parallel, SweepMemberRow.index, JobRow.id, JobRow.state)
        .join(SweepMemberRow, SweepMemberRow.sweep_id == SweepRow.id)
        .join(JobRow, JobRow.id == SweepMemberRow.job_id)
        .where(SweepRow.parallel.is_not(None), JobRow.state.not_in([str(s) for s in FINAL_JOB_STATES]))
    )
    return [(s, int(p or 0), i, j, st) for s, p, i, j, st in session.execute(query)]
