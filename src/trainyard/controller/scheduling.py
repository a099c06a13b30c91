"""The schedule step: snapshot from the store, ``scheduler.schedule``, decisions written back."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.lifecycle import retry_backoff
from trainyard.core.states import QUEUED_JOB_STATES, AttemptState, JobState
from trainyard.scheduler.snapshot import Decisions, KeepWaiting, PendingJob, PendingReason, Preempt, StartJob
from trainyard.services.requests import elastic_growth, task_requests
from trainyard.services.specs import StoredSpecs
from trainyard.spec.dependencies import Dependencies
from trainyard.spec.errors import SpecError
from trainyard.spec.models import JobSpec
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries
from trainyard.store.rows import AttemptRow, JobRow, TaskRow


@dataclass(frozen=True)
class PortPlan:
    master_port: int
    ports: dict[tuple[str, int], dict[str, list[int]]]  # (role, index) -> label -> ports


PendingFields = tuple[str | None, str | None, int | None, float | None]  # reason, message, position, eta


class WaitingJobs:
    """What the scheduler needs of each waiting job, read once and kept.

    A job's requests, priority and submit time never change while it waits, so only new
    arrivals are read (in chunks) and validated (through the one ``StoredSpecs`` cache);
    a cycle with 10,000 waiting jobs then reads little more than their ids.
    """

    def __init__(self, specs: StoredSpecs) -> None:
        self._specs = specs
        self._known: dict[int, PendingJob] = {}
        # Jobs whose stored job file no longer validates (e.g. a rule tightened in a newer
        # release): they are failed with this message instead of stalling every cycle.
        self.broken: dict[int, str] = {}
        # The pending reasons last written, so that only changes are written again. The
        # controller is their only writer; after a restart everything is written once.
        self.written: dict[int, PendingFields] = {}
        # When each job's were last written (the controller clock's monotonic seconds): see
        # ``Controller``'s ``reason_refresh_seconds``.
        self.refreshed: dict[int, float] = {}
        # The job files' ``dependencies`` of the waiting jobs that have any (controller/dependencies.py).
        self.dependencies: dict[int, Dependencies] = {}
        # When each job whose last attempt failed or was lost may start its next (controller/retries.py),
        # as the clock's timestamp; ``retry_backoff``: the first back-off (seconds; 0: none).
        self.retry_at: dict[int, float] = {}
        self.retry_backoff = 0.0

    def load(self, session: Session, now: float, data_nodes: Mapping[int, frozenset[str]] | None = None,
             arriving: Callable[[Session, str, JobSpec], frozenset[str]] | None = None) -> tuple[PendingJob, ...]:
        """The waiting jobs; one first seen now after an earlier attempt waits since ``now``;
        ``data_nodes``: the nodes holding some jobs' datasets (``controller.datasets``), and
        ``arriving(session, user, spec)``: those holding a job's first seen now (most jobs
        start in the cycle after they arrive: placement prefers them from that cycle on)."""
        current = job_queries.queued_job_ids(session)
        alive = set(current)
        if len(self._known) > len(alive):
            self._known = {k: v for k, v in self._known.items() if k in alive}
        self.broken = {k: v for k, v in self.broken.items() if k in alive}
        self.written = {k: v for k, v in self.written.items() if k in alive}
        self.refreshed = {k: v for k, v in self.refreshed.items() if k in alive}
        self.dependencies = {k: v for k, v in self.dependencies.items() if k in alive}
        self.retry_at = {k: v for k, v in self.retry_at.items() if k in alive and v > now}
        missing = [job_id for job_id in current if job_id not in self._known]
        lost_on = job_queries.lost_on_nodes(session, missing)
        if self.retry_backoff > 0:
            for job_id, (ended, failures) in job_queries.last_failures(session, missing).items():
                self.retry_at[job_id] = ended.timestamp() + retry_backoff(self.retry_backoff, failures)
        for job_id, spec_data, submitted_at, vc, user, attempt, attained in job_queries.waiting_job_facts(
            session, missing
        ):
            try:
                spec = self._specs.parse(job_id, spec_data)
            except SpecError as error:
                self.broken[job_id] = f"its stored job file is no longer valid: {error}"
                continue
            if spec.dependencies:
                self.dependencies[job_id] = spec.dependencies
            self._known[job_id] = PendingJob(
                job_id=job_id,
                priority_rank=spec.priority.rank,
                submitted_at=submitted_at.timestamp(),
                tasks=task_requests(spec),
                user=user,
                vc=vc,
                max_runtime=None if spec.maxRunTimeSeconds is None else float(spec.maxRunTimeSeconds),
                waiting_since=now if attempt > 0 else None,
                suspendable=spec.suspendable,
                attained_service=attained,
                avoid_nodes=lost_on.get(job_id, frozenset()),
                grow=elastic_growth(spec),
            )
            if arriving is not None and (nodes := arriving(session, user, spec)):
                self._known[job_id] = replace(self._known[job_id], data_nodes=nodes)
        for job_id, nodes in (data_nodes or {}).items():
            known = self._known.get(job_id)
            if known is not None and known.data_nodes != nodes:
                self._known[job_id] = replace(known, data_nodes=nodes)
        return tuple(self._known[j] for j in current if j in self._known)

    def started(self, job_ids: Iterable[int]) -> None:
        """Forget the jobs placed this cycle. One that comes back to the queue (a lost attempt
        retried, a preempted job) is a new waiting job: its attempt, attained service and the
        nodes to avoid are read again, even when it returns before the next cycle reads the queue."""
        for job_id in job_ids:
            self._known.pop(job_id, None)
            self.written.pop(job_id, None)  # placed: its pending reason was cleared
            self.refreshed.pop(job_id, None)


def apply_decisions(
    session: Session,
    decisions: Decisions,
    before: dict[int, PendingFields],
    ports: dict[int, PortPlan],
    clock: Clock,
    cannot_start: dict[int, str] | None = None,
    no_ports: dict[int, str] | None = None,
    recent: Collection[int] = (),
) -> tuple[list[int], dict[int, PendingFields]]:
    """Write placements, failures to start, and changed pending reasons (of the jobs in
    ``recent``, whose were written a moment ago, only a changed reason: not a message,
    position or estimate that changed alone).

    A job placed whose ports could not be reserved (``no_ports``: job id -> why) is not
    started and not failed: it waits, with ``PORTS`` as its reason, and is placed again
    in the next cycle.

    Returns the ids of the jobs that start and the pending reasons written.

    Placements go through the ORM and the state machine (the version column catches a
    job stopped meanwhile). Pending reasons are advisory and change for many jobs at
    once, so they are written in one bulk UPDATE, only where they changed, and only
    while the job still waits.
    """
    started = []
    cannot_start = cannot_start or {}
    no_ports = no_ports or {}
    rows = job_queries.jobs_by_ids(session, [s.job_id for s in decisions.starts] + list(cannot_start))
    for job_id, why in cannot_start.items():
        job = rows.get(job_id)
        if job is not None and job.state in QUEUED_JOB_STATES:
            record_event(session, job.id, transitions.cannot_start(job, why, clock.now()))
    for start in decisions.starts:
        job = rows.get(start.job_id)
        if job is None or job.state not in QUEUED_JOB_STATES or job.held_by or start.job_id in cannot_start:
            continue  # stopped or held since the snapshot was taken
        if start.job_id in no_ports:
            continue
        _place(session, job, start, ports[start.job_id], clock)
        started.append(job.id)
    waits = list(decisions.waits) + [
        KeepWaiting(job_id, PendingReason.PORTS, f"placed, but its ports could not be reserved ({why}); "
                    "it is placed again in the next cycle", 1, short="ports busy, retrying")
        for job_id, why in (no_ports or {}).items()
    ]
    # One row of bind parameters per waiting job whose reason changed.
    changed: list[dict[str, Any]] = [
        {"job": w.job_id, "reason": str(w.reason), "message": w.message, "position": w.position, "eta": w.eta,
         "short": w.short}
        for w in waits
        if (old := before.get(w.job_id)) != (str(w.reason), w.message, w.position, w.eta)
        and (old is None or old[0] != str(w.reason) or w.job_id not in recent)
    ]
    job_queries.write_pending_reasons(
        session,
        [{**c, "eta_at": None if c["eta"] is None else datetime.fromtimestamp(c["eta"], UTC)} for c in changed],
    )
    return started, {c["job"]: (c["reason"], c["message"], c["position"], c["eta"]) for c in changed}


def preempt_jobs(
    session: Session, victims: Sequence[Preempt], clock: Clock, spec_of: Callable[[JobRow], JobSpec]
) -> list[int]:
    """Mark running jobs' current attempts PREEMPTED (reconcile then stops their tasks with
    the job's grace period and requeues the job) or, for a suspendable job, SUSPENDED
    (reconcile tells its tasks to save their state). Returns the jobs actually preempted."""
    done = []
    for victim in victims:
        job = job_queries.job_by_id(session, victim.job_id)
        if job is None or job.state != JobState.RUNNING:
            continue
        attempt = next((a for a in job.attempts if a.number == job.attempt), None)
        if attempt is None or attempt.state != AttemptState.RUNNING:
            continue  # already ending or being preempted
        now = clock.now()
        if victim.suspend and job.suspendable:
            spec = spec_of(job)
            event = transitions.suspend(
                job, attempt, victim.reason, spec.suspendGracePeriodSeconds, spec.suspendSignal, now
            )
        else:
            event = transitions.preempt(job, attempt, victim.reason, now)
        record_event(session, job.id, event)
        done.append(victim.job_id)
    return done


def _place(session: Session, job: JobRow, start: StartJob, plan: PortPlan, clock: Clock) -> None:
    where = ", ".join(
        f"{p.role}/{p.index} on {p.node}"
        + (f" GPU {','.join(str(g.index) for g in p.gpus)}" if p.gpus else "")
        for p in start.placements
    )
    attempt = AttemptRow(job_id=job.id, master_port=plan.master_port)
    event = transitions.start_attempt(
        job, attempt, where, clock.now(), borrowed_by=job.vc if start.borrowed else None
    )
    session.add(attempt)  # with its tasks, in the cycle's one flush (no id needed before it)
    for p in start.placements:
        task = TaskRow(
            attempt=attempt,
            job_id=job.id,
            role=p.role,
            index=p.index,
            node=p.node,
            gpus=[[g.index, g.milli] for g in p.gpus],
            cpu_milli=p.cpu_milli,
            memory_mb=p.memory_mb,
            ports=plan.ports.get((p.role, p.index), {}),
        )
        transitions.place_task(task)
        session.add(task)
    record_event(session, job.id, event)
