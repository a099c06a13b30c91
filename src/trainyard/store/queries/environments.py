"""Queries about environments (``yard env``) and the jobs that build and use them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.states import FINAL_JOB_STATES, EnvironmentState
from trainyard.store.rows import EnvironmentRow, JobRow


def environment_named(session: Session, name: str) -> EnvironmentRow | None:
    return session.scalar(select(EnvironmentRow).where(EnvironmentRow.name == name))


def environment_by_id(session: Session, environment_id: int) -> EnvironmentRow | None:
    return session.get(EnvironmentRow, environment_id)


def environments_named(session: Session, names: Iterable[str]) -> dict[str, EnvironmentRow]:
    """The environments of these names that exist, by name."""
    wanted = set(names)
    if not wanted:
        return {}
    rows = session.scalars(select(EnvironmentRow).where(EnvironmentRow.name.in_(wanted)))
    return {row.name: row for row in rows}


def all_environments(session: Session) -> list[EnvironmentRow]:
    """Every environment, by name."""
    return list(session.scalars(select(EnvironmentRow).order_by(EnvironmentRow.name)))


def built_on(session: Session, environment_id: int) -> list[EnvironmentRow]:
    """The custom environments built on top of this one."""
    return list(session.scalars(select(EnvironmentRow).where(EnvironmentRow.base_id == environment_id)))


def ended_builds(session: Session) -> list[tuple[EnvironmentRow, JobRow]]:
    """Environments still BUILDING whose build job has ended, with that job."""
    query = (
        select(EnvironmentRow, JobRow)
        .join(JobRow, JobRow.id == EnvironmentRow.build_job_id)
        .where(EnvironmentRow.state == EnvironmentState.BUILDING, JobRow.state.in_([str(s) for s in FINAL_JOB_STATES]))
    )
    return [(env, job) for env, job in session.execute(query)]


def unfinished_job_specs(session: Session) -> list[tuple[int, dict[str, Any]]]:
    """(id, stored job file) of every job that has not ended: what may still run in an environment."""
    query = select(JobRow.id, JobRow.spec).where(JobRow.state.not_in([str(s) for s in FINAL_JOB_STATES]))
    return [(job_id, spec) for job_id, spec in session.execute(query)]
