"""Elastic jobs in the live controller: what the scheduler is told of them, and how its
``Grow`` and ``Shrink`` decisions are carried out (``scheduler/elastic.py`` decides).

A running elastic job is described to the scheduler (``describe``) with the workers it may
still add (new instance indices after the highest its attempt has used: a worker that left
keeps its row), those beyond its minimum it may lose (the last added first), and those
leaving. A resize changes the attempt in place (``grow``, ``shrink``): new workers are
placed as WAITING tasks, leaving ones are marked ``removed``, and every other running
worker of the role is marked ``restart``: reconcile stops it and starts it again at once,
so that all of them rendezvous again at the new size (torchrun's elastic agents would do
the same on a membership change; their own scale-up hangs in torch 2.13, pytorch#123678).
A leaving worker ends STOPPED, and its resources return only once it has exited.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from sqlalchemy.orm import Session

from trainyard.controller.world import RunningWork
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.scheduler.snapshot import Grow, RunningJob, Shrink
from trainyard.services.requests import grow_requests
from trainyard.spec.models import JobSpec
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

TaskPorts = Mapping[tuple[str, int], dict[str, list[int]]]  # (role, index) -> label -> ports


def describe(session: Session, work: RunningWork, spec_of: Callable[[JobRow], JobSpec]) -> tuple[RunningJob, ...]:
    """The running jobs, each elastic one with what it may add, lose, and is losing."""
    if not work.elastic:
        return work.running
    rows = job_queries.jobs_by_ids(session, sorted(work.elastic))
    specs = {job_id: spec_of(row) for job_id, row in rows.items()}
    roles = {job_id: spec.elastic_role for job_id, spec in specs.items() if spec.elastic_role is not None}
    workers_of = job_queries.elastic_workers(session, sorted(roles), roles)
    resized = job_queries.last_resized(session, sorted(roles))
    described = []
    for running in work.running:
        spec = specs.get(running.job_id)
        role = roles.get(running.job_id)
        if spec is None or role is None:
            described.append(running)
            continue
        minimum = spec.taskRoles[role].instances
        leaving = work.leaving.get(running.job_id, ())
        workers = sorted((p.index for p in running.placements if p.role == role and (p.role, p.index) not in leaving),
                         reverse=True)
        room = work.elastic[running.job_id] - len(workers)
        highest, ended = workers_of.get(running.job_id, (minimum - 1, False))
        # It grows unless it is resizing (workers leaving) or a worker ended on its own: the
        # job is finishing (its workers end together), or failing.
        growing = not leaving and not ended
        described.append(replace(
            running,
            grow=grow_requests(spec, range(highest + 1, highest + 1 + max(0, room))) if growing else (),
            # Beyond the minimum: every worker but the first ``minimum`` it started with.
            shrink=tuple((role, index) for index in workers if index >= minimum),
            leaving=leaving,
            # After a resize its workers restarted (``grow_interval`` counts from then on).
            resized_at=max(resized[running.job_id].timestamp(), running.started_at)
            if running.job_id in resized else None,
        ))
    return tuple(described)


def grow(session: Session, decisions: Sequence[Grow], ports: Mapping[int, TaskPorts], clock: Clock) -> list[int]:
    """Add each ``Grow``'s workers (with ``ports[job]``) to its job's running attempt, and
    restart the others at the new size; returns the jobs grown (one stopped meanwhile is
    left alone)."""
    grown = []
    for decision in decisions:
        job, attempt = _running_attempt(session, decision.job_id)
        if job is None or attempt is None:
            continue
        role = decision.placements[0].role
        before = _workers(attempt, role)
        given = ports.get(job.id, {})
        for p in decision.placements:
            task = TaskRow(attempt=attempt, job_id=job.id, role=p.role, index=p.index, node=p.node,
                           gpus=[[g.index, g.milli] for g in p.gpus], cpu_milli=p.cpu_milli, memory_mb=p.memory_mb,
                           ports=given.get((p.role, p.index), {}))
            transitions.place_task(task)
            session.add(task)
        _restart_others(attempt, role, {(p.role, p.index) for p in decision.placements})
        where = ", ".join(f"{p.role}/{p.index} on {p.node}" for p in decision.placements)
        record_event(session, job.id, transitions.resized(before, before + len(decision.placements),
                                                          f"grew into idle GPUs ({where})", clock.now()))
        grown.append(job.id)
    return grown


def shrink(session: Session, decisions: Sequence[Shrink], clock: Clock) -> list[int]:
    """Tell each ``Shrink``'s workers to leave and the others to restart at the new size."""
    shrunk = []
    for decision in decisions:
        job, attempt = _running_attempt(session, decision.job_id)
        if job is None or attempt is None:
            continue
        role = decision.tasks[0][0]
        before = _workers(attempt, role)
        leaving = set(decision.tasks)
        gone = 0
        for task in attempt.tasks:
            if (task.role, task.index) in leaving and not TaskState(task.state).is_final and not task.removed:
                task.removed = True
                gone += 1
        if not gone:
            continue
        _restart_others(attempt, role, leaving)
        record_event(session, job.id, transitions.resized(before, before - gone, decision.reason, clock.now()))
        shrunk.append(job.id)
    return shrunk


def lost_worker(session: Session, job: JobRow, attempt: AttemptRow, task: TaskRow, spec: JobSpec,
                clock: Clock) -> None:
    """``task`` of a running elastic job ended on its own, failed or lost: if it was a worker
    beyond the minimum (the minimum's workers decide the attempt's outcome, as any task), the
    others restart at the smaller size, as after a shrink."""
    role = spec.elastic_role
    if role is None or task.role != role or task.index < spec.taskRoles[role].instances or task.removed:
        return
    # Not marked removed: a worker lost on its own keeps the job from growing again in this
    # attempt (``describe``), so that one that fails at every start does not churn the others.
    others = _workers(attempt, role)  # ``task`` is final already
    if not others:
        return  # every worker has ended: the job is ending, with nothing left to resize
    before = others + 1
    _restart_others(attempt, role, {(task.role, task.index)})
    record_event(session, job.id, transitions.resized(before, before - 1, f"worker {task.role}/{task.index} "
                                                      f"ended on its own ({task.message})", clock.now()))


def _running_attempt(session: Session, job_id: int) -> tuple[JobRow, AttemptRow] | tuple[None, None]:
    """The job and its current attempt, if both run (not stopping, not being preempted)."""
    job = job_queries.job_by_id(session, job_id)
    if job is None or job.state != JobState.RUNNING:
        return None, None
    attempt = next((a for a in job.attempts if a.number == job.attempt), None)
    if attempt is None or attempt.state != AttemptState.RUNNING:
        return None, None
    return job, attempt


def _workers(attempt: AttemptRow, role: str) -> int:
    """The workers of ``role`` it runs on (not those leaving or gone)."""
    return sum(1 for t in attempt.tasks if t.role == role and not TaskState(t.state).is_final and not t.removed)


def _restart_others(attempt: AttemptRow, role: str, changed: set[tuple[str, int]]) -> None:
    """Every running worker of ``role`` not ``changed`` stops and starts again in place: the
    job's size changed, and its workers rendezvous again at the new one (other roles go on)."""
    for task in attempt.tasks:
        if task.role == role and task.state == TaskState.RUNNING and not task.removed \
                and (task.role, task.index) not in changed:
            task.restart = True
