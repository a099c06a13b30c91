"""Queries on sweeps the controller makes every cycle."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

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


def sweep_by_id(session: Session, sweep_id: int) -> SweepRow | None:
    return session.get(SweepRow, sweep_id)


def sweeps_page(session: Session, *, owner_id: int | None, owner_name: str | None, before: int | None,
                limit: int) -> list[SweepRow]:
    """Up to ``limit`` sweeps, newest first, older than ``before``; only ``owner_id``'s (a
    user id) or ``owner_name``'s (a user name) when given."""
    query = select(SweepRow).options(selectinload(SweepRow.members)).order_by(SweepRow.id.desc()).limit(limit)
    if owner_id is not None:
        query = query.where(SweepRow.user_id == owner_id)
    if owner_name is not None:
        query = query.where(SweepRow.user.has(name=owner_name))
    if before is not None:
        query = query.where(SweepRow.id < before)
    return list(session.scalars(query).unique())


def sweeps_of_jobs(session: Session, job_ids: list[int]) -> dict[int, tuple[int, int]]:
    """job id -> (its sweep's id, its index there), for those of ``job_ids`` in a sweep."""
    query = select(SweepMemberRow.job_id, SweepMemberRow.sweep_id, SweepMemberRow.index).where(
        SweepMemberRow.job_id.in_(job_ids))
    return {job: (sweep, index) for job, sweep, index in session.execute(query)}
