"""The reconcile step: launch placed tasks, signal stops, observe ends, move job states.

Level-triggered, like a Kubernetes controller: every pass looks at what should be and what
the backend says is, and closes the gap. A pass after a crash is no different from any
other, which is how running tasks are re-adopted and nothing is launched twice (launch is
idempotent by task key). Each phase reads, does its I/O outside any transaction, then
writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from trainyard.backends.base import Backend, GangLauncher, TaskKey, TaskLaunch, TaskStatus
from trainyard.controller.launching import build_launch, task_key
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.exitcodes import classify_exit
from trainyard.core.lifecycle import (
    MAX_PLATFORM_RETRIES,
    RolePolicy,
    evaluate_completion,
    job_should_retry,
    platform_retries_used,
    platform_retry_due,
    task_should_rerun,
)
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.monitor.exposition import ControllerTimings
from trainyard.spec.models import JobSpec
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

log = logging.getLogger(__name__)

@dataclass
class ActiveTask:
    key: TaskKey
    task_id: int
    state: TaskState
    stop_needed: bool
    stop_sent: bool
    grace: float
    launch: TaskLaunch | None = None
    error: str = ""


@dataclass
class Plan:
    launches: list[ActiveTask] = field(default_factory=list)
    stops: list[ActiveTask] = field(default_factory=list)
    running: list[ActiveTask] = field(default_factory=list)


def current_attempt(job: JobRow) -> AttemptRow | None:
    for attempt in job.attempts:
        if attempt.number == job.attempt:
            return attempt
    return None


class Reconciler:
    def __init__(
        self, db: Database, backend: Backend, clock: Clock, spec_of: Callable[[JobRow], JobSpec],
        timings: ControllerTimings | None = None,
    ):
        self.db = db
        self.backend = backend
        self.clock = clock
        self.spec_of = spec_of
        self.timings = timings

    def run(self) -> bool:
        """One pass; returns whether any task ended or started (resources changed)."""
        plan = self._plan()
        for group in self._launch_groups(plan.launches):
            launches = [item.launch for item in group if item.launch is not None]
            try:
                if isinstance(self.backend, GangLauncher):
                    self.backend.launch_gang(launches)
                else:
                    self.backend.launch(launches[0])
            except Exception as exc:  # noqa: BLE001 - any launch failure fails the task(s), visibly
                log.exception("launch of %s failed", ", ".join(str(item.key) for item in group))
                for item in group:
                    item.launch = None
                    item.error = f"launch failed: {exc}"
        # A task that ended on its own before its stop was sent keeps its own exit: look
        # first, so that a job finishing just as it is preempted is not run again.
        stopping = [t.key for t in plan.stops if t.state == TaskState.RUNNING]
        ended = {
            k for k, s in (self.backend.observe(stopping) if stopping else {}).items()
            if not s.running and not s.lost and s.exit_code is not None
        }
        plan.stops = [t for t in plan.stops if t.key not in ended]
        for item in plan.stops:
            try:
                self.backend.stop(item.key, item.grace)
            except Exception:  # noqa: BLE001 - one task's failed stop must not stall the rest
                log.exception("stop of %s failed; will retry", item.key)
                item.error = "stop failed"
        # A task still WAITING in the store may have been launched just before a crash:
        # ask the backend, so that its GPUs are not handed out while it still runs.
        unlaunched = [t.key for t in plan.stops if t.state == TaskState.WAITING]
        observed = [t.key for t in plan.running] + unlaunched
        statuses = self.backend.observe(observed) if observed else {}
        return self._write(plan, statuses)

    def _launch_groups(self, launches: list[ActiveTask]) -> list[list[ActiveTask]]:
        """One group per task, or, for a gang-launching backend, one per job attempt."""
        if not isinstance(self.backend, GangLauncher):
            return [[item] for item in launches]
        groups: dict[tuple[int, int], list[ActiveTask]] = {}
        for item in launches:
            groups.setdefault((item.key.job_id, item.key.attempt), []).append(item)
        return list(groups.values())

    def _plan(self) -> Plan:
        plan = Plan()
        with self.db.session() as session:
            addresses = node_queries.node_addresses(session)
            for job in job_queries.holding_jobs_with_tasks(session):
                attempt = current_attempt(job)
                if attempt is None:
                    continue
                stop_needed = job.state == JobState.STOPPING or attempt.state != AttemptState.RUNNING
                for task in attempt.tasks:
                    if TaskState(task.state).is_final:
                        continue
                    item = ActiveTask(
                        key=task_key(job, attempt, task),
                        task_id=task.id,
                        state=TaskState(task.state),
                        stop_needed=stop_needed,
                        stop_sent=task.stop_sent,
                        grace=job.grace_seconds,
                    )
                    if stop_needed and not task.stop_sent:
                        plan.stops.append(item)
                    elif task.state == TaskState.WAITING:
                        item.launch = build_launch(job, attempt, task, self.spec_of(job), addresses)
                        plan.launches.append(item)
                    if task.state == TaskState.RUNNING:
                        plan.running.append(item)
        return plan

    def _write(self, plan: Plan, statuses: dict[TaskKey, TaskStatus]) -> bool:
        changed = False
        now = self.clock.now()
        first_starts: list[float] = []  # submit-to-start seconds of jobs whose first task runs now
        with self.db.session() as session:
            touched: set[int] = set()
            for item in plan.launches:
                task = job_queries.task_by_id(session, item.task_id)
                if task is None or task.state != TaskState.WAITING:
                    continue
                if item.launch is None:
                    transitions.task_launch_failed(task, item.error, now)
                else:
                    job = job_queries.job_by_id(session, task.job_id)
                    assert job is not None  # a task's job is deleted only with it
                    if job.started_at is None:
                        first_starts.append((now - job.submitted_at).total_seconds())
                    transitions.task_launched(task, job, now)
                touched.add(task.job_id)
                changed = True
            for item in plan.stops:
                task = job_queries.task_by_id(session, item.task_id)
                if task is None or item.error:
                    continue
                transitions.stop_sent(task)
                if task.state == TaskState.WAITING:
                    status = statuses.get(item.key)
                    if status is not None and status.lost:
                        transitions.task_stopped_unlaunched(task, now)
                    else:  # it did start: watch it end like any running task
                        transitions.task_found_running(task, now)
                touched.add(task.job_id)
            for item in plan.running:
                status = statuses.get(item.key)
                if status is None or status.running:
                    continue
                task = job_queries.task_by_id(session, item.task_id)
                if task is None or task.state != TaskState.RUNNING or task.run != item.key.run:
                    continue
                self._task_ended(session, task, status, now)
                touched.add(task.job_id)
                changed = True
            for job_id in sorted(touched):
                job = job_queries.job_by_id(session, job_id)
                if job is not None and job.state in (JobState.RUNNING, JobState.STOPPING):
                    changed |= self._advance_job(session, job)
        if self.timings is not None:  # once the write has committed: a rolled-back start did not happen
            for seconds in first_starts:
                self.timings.start_latency.observe(max(0.0, seconds))
        return changed

    def _task_ended(self, session: Session, task: TaskRow, status: TaskStatus, now: datetime) -> None:
        job = job_queries.job_by_id(session, task.job_id)
        assert job is not None
        exit_info = classify_exit(status.exit_code)
        # The backend's note may repeat the signal the description already names.
        notes = [n for n in (status.message or "").split("; ") if n and n not in exit_info.description]
        detail = exit_info.description + (f" ({'; '.join(notes)})" if notes else "")
        if task.stop_sent:
            new_state = TaskState.STOPPED
        elif status.exit_code == 0:
            new_state = TaskState.SUCCEEDED
        elif status.exit_code is None:
            # Nobody knows how it ended: not its failure. Not re-run in place either: the
            # attempt decides (core/lifecycle: a platform retry).
            new_state = TaskState.LOST
        else:
            spec = self.spec_of(job)
            retry_count = spec.taskRoles[task.role].taskRetryCount
            if task_should_rerun(status.exit_code, task.run + 1, retry_count):
                event = transitions.task_rerun(task, status.exit_code, detail, retry_count, self.clock.now())
                record_event(session, job.id, event)
                return
            new_state = TaskState.FAILED
        event = transitions.task_ended(
            task, new_state, status.exit_code, detail, ended_at(task, status, now), self.clock.now()
        )
        record_event(session, job.id, event)

    def _advance_job(self, session: Session, job: JobRow) -> bool:
        attempt = current_attempt(job)
        if attempt is None:
            return False
        states = {(t.role, t.index): TaskState(t.state) for t in attempt.tasks}
        all_final = all(s.is_final for s in states.values())
        if job.state == JobState.RUNNING and attempt.state == AttemptState.RUNNING:
            self._complete(job, attempt, states, "")
        if not all_final:
            return False
        if attempt.state == AttemptState.PREEMPTED and TaskState.STOPPED not in states.values():
            # Every task ended on its own before its stop was sent: the job's own outcome
            # stands, and a job preempted just as it finished is not run again.
            self._complete(job, attempt, states, " (it ended before its preemption took effect)")
        now = self.clock.now()
        ends = [t.finished_at for t in attempt.tasks if t.finished_at is not None]
        transitions.attempt_ended(attempt, max(ends) if ends else None, now)
        if job.state == JobState.STOPPING:
            record_event(session, job.id, transitions.stopped(job, attempt, now))
            return True
        if attempt.state == AttemptState.PREEMPTED:
            # Requeued as a new attempt with its place in the queue; retries stay unspent.
            record_event(session, job.id, transitions.requeue_preempted(job, attempt, now))
            return True
        if attempt.state == AttemptState.LOST:
            # A platform fault: a new attempt that spends none of jobRetryCount.
            used = platform_retries_used(a.state for a in job.attempts)
            record_event(session, job.id, transitions.requeue_lost(job, attempt, used, now))
            return True
        if attempt.state == AttemptState.TIMED_OUT:
            # As Slurm's TIMEOUT: not retried, a new attempt would only run out of time again.
            record_event(session, job.id, transitions.fail(job, attempt, attempt.reason, now))
            return True
        if attempt.state == AttemptState.SUCCEEDED:
            record_event(session, job.id, transitions.succeed(job, attempt, now))
            return True
        if attempt.state == AttemptState.FAILED:
            spec = self.spec_of(job)
            if job_should_retry(attempt.exit_code, job.retries_used, spec.jobRetryCount):
                record_event(session, job.id, transitions.retry_failed(job, attempt, spec.jobRetryCount, now))
                return True
            why = failure_why(attempt)
            record_event(session, job.id, transitions.fail(job, attempt, f"{attempt.reason}; {why}", now))
        return True

    def _complete(
        self, job: JobRow, attempt: AttemptRow, states: Mapping[tuple[str, int], TaskState], note: str
    ) -> None:
        """Apply the job's completion policy to its tasks' states, if it decides."""
        roles = [
            RolePolicy(name, role.instances, role.completion.minFailedInstances, role.completion.minSucceededInstances)
            for name, role in self.spec_of(job).taskRoles.items()
        ]
        completion = evaluate_completion(roles, states)
        if completion is None:
            return
        outcome, reason = AttemptState(completion.outcome), completion.reason + note
        if outcome == AttemptState.LOST and not platform_retry_due(a.state for a in job.attempts):
            outcome = AttemptState.FAILED
            reason += f"; its {MAX_PLATFORM_RETRIES} platform retries are used up, so this counts as a failure"
        failed = [t.exit_code for t in attempt.tasks if t.state == TaskState.FAILED]
        failed += [t.exit_code for t in attempt.tasks if t.state == TaskState.LOST]
        transitions.complete_attempt(attempt, outcome, reason, failed[0] if failed else 0)


def failure_why(attempt: AttemptRow) -> str:
    """Why a failed attempt failed, in words: its exit status, or, when no task has one,
    what the backend knew (a task whose supervisor could not start says why)."""
    if attempt.exit_code is None:
        unknown = [t for t in attempt.tasks if t.state in (TaskState.FAILED, TaskState.LOST) and t.exit_code is None]
        if unknown and unknown[0].message:
            return f"task {unknown[0].role}/{unknown[0].index}: {unknown[0].message}"
    return classify_exit(attempt.exit_code).description


def ended_at(task: TaskRow, status: TaskStatus, now: datetime) -> datetime:
    """When the task ended: the backend's record if it has a believable one (after the task
    started, not after now), else now."""
    when = status.finished_at
    if when is None or when > now or (task.started_at is not None and when < task.started_at):
        return now
    return when
