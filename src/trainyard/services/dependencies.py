"""A job's ``dependencies`` (the job file's, ``spec/dependencies.py``) at submit and in its view.

At submit every job waited for must exist and be the submitter's own (an admin may wait for
anyone's); another user's job is reported exactly as a job that does not exist, so that a
non-admin learns nothing of it. Since a job can only name jobs that exist before it, no
cycle can be written, and a job cannot name itself. A dependency that could already never
be met (``afterok`` on a job that FAILED) is refused too, with its field path.

While the job waits, the controller keeps it from the scheduler until every dependency is
met, and ends it when one never can be (``controller/dependencies.py``).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainyard.core import dependencies as rules
from trainyard.core.states import JobState
from trainyard.schemas.jobs import DependencyView
from trainyard.services.errors import Invalid
from trainyard.spec.models import JobSpec
from trainyard.store.queries import dependencies as queries
from trainyard.store.rows import UserRow


def check_dependencies(session: Session, user: UserRow, spec: JobSpec) -> None:
    """Invalid (422, with each field path) unless every job ``spec`` waits for exists, is
    ``user``'s (or ``user`` is an admin) and may still meet its condition."""
    if not spec.dependencies:
        return
    listed = list(spec.dependencies.listed())
    found = queries.job_states(session, [job_id for _, job_id, _ in listed])
    problems = []
    for condition, job_id, path in listed:
        state_and_owner = found.get(job_id)
        if state_and_owner is None or (not user.is_admin and state_and_owner[1] != user.id):
            problems.append((path, f"no job {job_id}: a job may only wait for jobs that exist (see `yard jobs`)"
                             + ("" if user.is_admin else " and are yours")))
            continue
        state = state_and_owner[0]
        if rules.status(condition, state) == rules.Status.NEVER:
            problems.append((path, f"job {job_id} already {state}, so {condition} (wait for it to "
                             f"{rules.WANTS[condition]}) can never be met; drop or change this dependency"))
    if problems:
        raise Invalid(f"{problems[0][0]}: {problems[0][1]}",
                      details=[{"path": path, "message": message} for path, message in problems])


def dependency_views(session: Session, spec: JobSpec) -> list[DependencyView]:
    """Each job ``spec`` waits for, with its state and whether the condition is met."""
    if not spec.dependencies:
        return []
    listed = list(spec.dependencies.listed())
    found = queries.job_states(session, [job_id for _, job_id, _ in listed])
    views = []
    for condition, job_id, _ in listed:
        state = found.get(job_id, (None, 0))[0]
        views.append(DependencyView(
            condition=condition, job=job_id, state=None if state is None else JobState(state),
            status=str(rules.status(condition, state)) if state is not None else str(rules.Status.NEVER),
        ))
    return views
