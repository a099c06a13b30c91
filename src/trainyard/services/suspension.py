"""Suspending a job by hand and resuming it: ``yard suspend`` / ``yard resume``.

A running job that declared ``preemption: suspend`` is told to save its state (reconcile
does the telling, as for a suspension the scheduler decides) and then waits SUSPENDED,
held by whoever suspended it, until ``resume``; a waiting job is simply held (Slurm's
``scontrol hold``). A job that cannot save its state is refused: suspending it would
lose its work, and ``yard stop`` says so honestly. An admin's hold on another user's job
is the admin's to release.
"""

from __future__ import annotations

from sqlalchemy.orm.exc import StaleDataError

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.states import FINAL_JOB_STATES, AttemptState, JobState
from trainyard.services.errors import Conflict, Forbidden
from trainyard.services.jobs import STOP_RETRIES, get_job
from trainyard.services.specs import StoredSpecs
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.rows import AttemptRow, JobRow, UserRow


def _current(job: JobRow) -> AttemptRow | None:
    return next((a for a in job.attempts if a.number == job.attempt), None)


def _suspend(job: JobRow, viewer: UserRow, specs: StoredSpecs, clock: Clock) -> transitions.Event | None:
    """The event of suspending ``job`` (None when it is already held)."""
    now = clock.now()
    if job.state in FINAL_JOB_STATES:
        raise Conflict(f"job {job.id} has already ended ({job.state})")
    if job.state == JobState.STOPPING:
        raise Conflict(f"job {job.id} is being stopped")
    if job.held_by is not None:
        return None
    if job.state in (JobState.WAITING, JobState.SUSPENDED):
        return transitions.hold(job, viewer.name, now)
    attempt = _current(job)
    if attempt is not None and attempt.state == AttemptState.SUSPENDED:  # the scheduler is suspending it
        job.held_by = viewer.name
        return transitions.Event(
            transitions.EventKind.SUSPEND_REQUESTED,
            f"suspend requested by {viewer.name} while it was being suspended: held once it has", now,
        )
    spec = specs.of(job)
    if not job.suspendable:
        raise Conflict(
            f"job {job.id} cannot be suspended: its job file does not say 'preemption: suspend', so it could not "
            "save its state and would lose its work; stop it (yard stop), or submit it with 'preemption: suspend'"
        )
    if attempt is None or attempt.state != AttemptState.RUNNING:
        raise Conflict(f"job {job.id}'s attempt is ending ({job.state_message}); suspend it once it waits")
    return transitions.suspend(
        job, attempt, f"suspended by {viewer.name}", spec.suspendGracePeriodSeconds, spec.suspendSignal, now,
        by=viewer.name,
    )


def _resume(job: JobRow, viewer: UserRow, clock: Clock) -> transitions.Event:
    if job.held_by is None:
        if job.state == JobState.SUSPENDED:
            raise Conflict(f"job {job.id} is not held: it waits to resume as soon as there is room")
        raise Conflict(f"job {job.id} is not suspended ({job.state})")
    if job.held_by != viewer.name and job.held_by != job.user.name and not viewer.is_admin:
        raise Forbidden(f"job {job.id} was suspended by {job.held_by}, an admin: only an admin may resume it")
    previous = next((a for a in job.attempts if a.number == job.attempt - 1), None)
    saved_state = previous is not None and previous.state == AttemptState.SUSPENDED
    return transitions.release(job, viewer.name, saved_state, clock.now())


def suspend_job(db: Database, viewer: UserRow, job_id: int, *, specs: StoredSpecs, clock: Clock) -> None:
    """Suspend the job (see the module doc) and hold it until ``resume_job``; tried again
    when the controller moved the job meanwhile."""
    for attempt in range(STOP_RETRIES):
        try:
            with db.session() as session:
                job = get_job(session, viewer, job_id)
                event = _suspend(job, viewer, specs, clock)
                if event is not None:
                    record_event(session, job.id, event)
            return
        except StaleDataError:
            if attempt == STOP_RETRIES - 1:
                raise


def resume_job(db: Database, viewer: UserRow, job_id: int, *, clock: Clock) -> None:
    """Release a held job: it waits to resume as a new attempt (or, still being suspended,
    once its suspension has ended)."""
    for attempt in range(STOP_RETRIES):
        try:
            with db.session() as session:
                job = get_job(session, viewer, job_id)
                record_event(session, job.id, _resume(job, viewer, clock))
            return
        except StaleDataError:
            if attempt == STOP_RETRIES - 1:
                raise
