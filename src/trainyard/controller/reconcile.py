"""The reconcile step: launch placed tasks, signal stops, observe ends, move job states.

Level-triggered, like a Kubernetes controller: every pass looks at what should be and what
the backend says is, and closes the gap. A pass after a crash is no different from any
other, which is how running tasks are re-adopted and nothing is launched twice (launch is
idempotent by task key). Each phase reads, does its I/O outside any transaction, then
writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy.orm import Session

from trainyard.backends.base import (
    Backend,
    DatasetCaches,
    GangLauncher,
    Suspender,
    SuspendRequest,
    TaskKey,
    TaskLaunch,
    TaskStatus,
)
from trainyard.controller.elastic import lost_worker
from trainyard.controller.launching import EnvironmentGone, RunsIn, build_launch, environments_of, task_key
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.exitcodes import (
    DATASET_UNAVAILABLE,
    IMAGE_UNAVAILABLE,
    OUT_OF_MEMORY,
    SUSPENDED_EXIT_CODE,
    classify_exit,
    image_unavailable_message,
    is_image_unavailable,
    is_out_of_memory,
    out_of_memory_message,
)
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
from trainyard.services.datasets import DatasetUnavailable, task_datasets
from trainyard.services.storages import StorageUnavailable, storage_paths, task_mounts
from trainyard.services.workdirs import WorkdirStore
from trainyard.spec.models import JobSpec
from trainyard.store.db import Database
from trainyard.store.events import job_events, record_event
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

log = logging.getLogger(__name__)

# Backend calls (launches, stops) a pass makes at once, each on its own thread.
BACKEND_CALLS = 8
T = TypeVar("T")


def side_by_side(call: Callable[[T], None], items: Sequence[T]) -> None:
    """``call`` on each item, up to ``BACKEND_CALLS`` at a time; returns once all have
    returned (``call`` handles its own errors). One item: on this thread."""
    if len(items) <= 1:
        for item in items:
            call(item)
        return
    with ThreadPoolExecutor(max_workers=min(BACKEND_CALLS, len(items)), thread_name_prefix="trainyard-backend") as pool:
        for future in [pool.submit(call, item) for item in items]:
            future.result()

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
    suspend: SuspendRequest | None = None  # a stop that asks the task to save its state first
    # A stop for an elastic job's resize: the task's request file says so as it is stopped.
    resize: SuspendRequest | None = None


@dataclass
class Plan:
    launches: list[ActiveTask] = field(default_factory=list)
    stops: list[ActiveTask] = field(default_factory=list)  # stops and suspend requests to send
    # Tasks told to suspend that still run at the end of their grace period: stopped now.
    overdue: list[ActiveTask] = field(default_factory=list)
    running: list[ActiveTask] = field(default_factory=list)


def current_attempt(job: JobRow) -> AttemptRow | None:
    for attempt in job.attempts:
        if attempt.number == job.attempt:
            return attempt
    return None


class Reconciler:
    def __init__(
        self, db: Database, backend: Backend, clock: Clock, spec_of: Callable[[JobRow], JobSpec],
        timings: ControllerTimings | None = None, workdirs: WorkdirStore | None = None,
    ):
        self.db = db
        self.workdirs = workdirs  # where jobs' working directories are (None: this server keeps none)
        self.backend = backend
        self.clock = clock
        self.spec_of = spec_of
        self.timings = timings
        # Suspending tasks already stopped at their deadline (forgotten once they end).
        self._overdue_stopped: set[TaskKey] = set()
        # Tasks whose image pull is in the job's events (forgotten once they end).
        self._pull_recorded: set[TaskKey] = set()
        # How many tasks were found LOST so far: the controller looks at its nodes again
        # after one, whose node may have failed, before placing the retry.
        self.lost = 0

    def run(self, only: Collection[int] | None = None) -> bool:
        """One pass; returns whether any task ended or started (resources changed).
        ``only``: a pass over these jobs alone (the jobs a schedule step just placed,
        preempted or resized: their launches and stops go out without reading and
        observing every running job again, which the next full pass does).

        The gangs' launches, then the stops, are sent side by side (``BACKEND_CALLS`` at a
        time): one slow launch or stop (a node or a Slurm controller slow to answer)
        delays the others by nothing but the pass's end, never by its own time each."""
        plan = self._plan(only)
        side_by_side(self._launch_group, self._launch_groups(plan.launches))
        # A task that ended on its own before its stop was sent keeps its own exit: look
        # first, so that a job finishing just as it is preempted is not run again.
        stopping = [t.key for t in plan.stops if t.state == TaskState.RUNNING]
        ended = {
            k for k, s in (self.backend.observe(stopping) if stopping else {}).items()
            if not s.running and not s.lost and s.exit_code is not None
        }
        plan.stops = [t for t in plan.stops if t.key not in ended]
        side_by_side(self._send_stop, plan.stops)
        self._stop_overdue(plan, whole=only is None)
        # A task still WAITING in the store may have been launched just before a crash:
        # ask the backend, so that its GPUs are not handed out while it still runs.
        unlaunched = [t.key for t in plan.stops if t.state == TaskState.WAITING]
        observed = [t.key for t in plan.running] + unlaunched
        statuses = self.backend.observe(observed) if observed else {}
        return self._write(plan, statuses, whole=only is None)

    def _launch_group(self, group: list[ActiveTask]) -> None:
        """Launch one gang (one task on a backend that launches tasks one by one); a failure
        fails the gang's tasks, with why."""
        unbuilt = next((item.error for item in group if item.launch is None), None)
        if unbuilt is not None:  # one could not be built (its error says why): none of its gang starts
            for item in group:
                item.launch, item.error = None, item.error or unbuilt
            return
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

    def _send_stop(self, item: ActiveTask) -> None:
        try:
            if item.suspend is not None and isinstance(self.backend, Suspender):
                self.backend.suspend(item.key, item.suspend)
            else:
                if item.resize is not None and isinstance(self.backend, Suspender):
                    self.backend.suspend(item.key, item.resize)  # the file only: the stop follows
                self.backend.stop(item.key, item.grace)
        except Exception:  # noqa: BLE001 - one task's failed stop must not stall the rest
            log.exception("stop of %s failed; will retry", item.key)
            item.error = "stop failed"

    def _stop_overdue(self, plan: Plan, *, whole: bool) -> None:
        """Stop what a suspension's grace period left running (once per task; the grace is
        spent, so at once: SIGTERM, then SIGKILL). ``whole``: the plan has every running
        task (what is no longer running is forgotten)."""
        if whole:
            self._overdue_stopped &= {item.key for item in plan.running}
        for item in plan.overdue:
            if item.key in self._overdue_stopped:
                continue
            try:
                self.backend.stop(item.key, 0.0)
                self._overdue_stopped.add(item.key)
            except Exception:  # noqa: BLE001 - tried again on the next pass
                log.exception("stop of %s after its suspend grace period failed; will retry", item.key)

    def _launch_groups(self, launches: list[ActiveTask]) -> list[list[ActiveTask]]:
        """One group per task, or, for a gang-launching backend, one per job attempt."""
        if not isinstance(self.backend, GangLauncher):
            return [[item] for item in launches]
        groups: dict[tuple[int, int], list[ActiveTask]] = {}
        for item in launches:
            groups.setdefault((item.key.job_id, item.key.attempt), []).append(item)
        return list(groups.values())

    def _plan(self, only: Collection[int] | None = None) -> Plan:
        plan = Plan()
        now = self.clock.now()
        with self.db.session() as session:
            addresses = node_queries.node_addresses(session)
            paths: tuple[str, ...] | None = None  # every storage's path, read once a task is to launch
            for job in job_queries.holding_jobs_with_tasks(session, only):
                attempt = current_attempt(job)
                if attempt is None:
                    continue
                stop_needed = job.state == JobState.STOPPING or attempt.state != AttemptState.RUNNING
                suspend = self._suspend_request(job, attempt, now)
                environments: dict[str, RunsIn] | None = None  # read once the job has a task to launch
                # An elastic job resizing: its workers start again only once every one told to
                # restart has stopped, so that they all rendezvous at the new size together.
                resizing = any(t.restart for t in attempt.tasks)
                resize = None
                if resizing or any(t.removed and not TaskState(t.state).is_final for t in attempt.tasks):
                    resize = self._resize_notice(attempt, now, job.grace_seconds)
                for task in attempt.tasks:
                    if TaskState(task.state).is_final:
                        continue
                    # A worker an elastic job's resize told to leave, or to restart, stops alone.
                    told = stop_needed or task.removed or task.restart
                    item = ActiveTask(
                        key=task_key(job, attempt, task),
                        task_id=task.id,
                        state=TaskState(task.state),
                        stop_needed=told,
                        stop_sent=task.stop_sent,
                        grace=job.grace_seconds,
                    )
                    if told and not task.stop_sent:
                        if suspend is not None and task.state == TaskState.RUNNING:
                            item.suspend, item.grace = suspend, (suspend.deadline - now).total_seconds()
                        elif not stop_needed and task.state == TaskState.RUNNING:
                            item.resize = resize
                        plan.stops.append(item)
                    elif suspend is not None and task.state == TaskState.RUNNING and now >= suspend.deadline:
                        plan.overdue.append(item)
                    elif task.state == TaskState.WAITING and not (resizing and job.elastic_max is not None):
                        spec = self.spec_of(job)
                        if environments is None:
                            environments = environments_of(session, spec)
                        # A storage or dataset removed or a grant taken back since submit, or an environment
                        # deleted (--force): fails the launch, saying so.
                        try:
                            mounts = task_mounts(session, job.user, spec, task.role)
                            if paths is None:
                                paths = storage_paths(session)
                            datasets = task_datasets(session, job.user, spec, task.role)
                            if datasets and not isinstance(self.backend, DatasetCaches):
                                raise DatasetUnavailable("this cluster's backend keeps no dataset cache (the local "
                                                         "and Slurm backends do); run the job without datasets")
                            item.launch = build_launch(job, attempt, task, spec, addresses, mounts, environments,
                                                       paths, self._workdir_archive(job), datasets)
                        except StorageUnavailable as exc:
                            item.error = str(exc)
                        except EnvironmentGone as gone:
                            item.error = f"launch failed: {gone}"
                        plan.launches.append(item)
                    if task.state == TaskState.RUNNING:
                        plan.running.append(item)
        return plan

    def _workdir_archive(self, job: JobRow) -> str | None:
        """The archive of the job's working directory, or EnvironmentGone when it is not kept."""
        if job.workdir is None:
            return None
        path = self.workdirs.path(job.workdir) if self.workdirs is not None else None
        if path is None or not path.is_file():
            raise EnvironmentGone(f"the job's working directory {job.workdir} is not on this server any more; "
                                  "submit the job again from its folder")
        return str(path)

    @staticmethod
    def _resize_notice(attempt: AttemptRow, now: datetime, grace: float) -> SuspendRequest | None:
        """What the workers an elastic job's resize stops find in their request file
        (``runtime.resizing``): the size it restarts at. No signal: SIGTERM follows at once."""
        roles = {t.role for t in attempt.tasks if t.removed or t.restart}
        if len(roles) != 1:
            return None
        [role] = roles
        size = sum(1 for t in attempt.tasks if t.role == role and not t.removed and not TaskState(t.state).is_final)
        return SuspendRequest(f"the job is resized to {size} worker{'s' if size != 1 else ''}",
                              now + timedelta(seconds=grace), None, resize_to=size)

    def _suspend_request(self, job: JobRow, attempt: AttemptRow, now: datetime) -> SuspendRequest | None:
        """What the tasks of a suspending attempt are told (None for any other attempt)."""
        if attempt.state != AttemptState.SUSPENDED:
            return None
        spec = self.spec_of(job)
        since = attempt.stop_requested_at or now
        signal = None if spec.suspendSignal == "none" else spec.suspendSignal
        return SuspendRequest(attempt.reason, since + timedelta(seconds=spec.suspendGracePeriodSeconds), signal)

    def _write(self, plan: Plan, statuses: dict[TaskKey, TaskStatus], *, whole: bool = True) -> bool:
        changed = False
        now = self.clock.now()
        first_starts: list[float] = []  # submit-to-start seconds of jobs whose first task runs now
        with self.db.session() as session:
            ended = [item for item in plan.running if (s := statuses.get(item.key)) is not None and not s.running]
            # Held while the loops below read them one by one.
            loaded = job_queries.load_jobs_whole(session, [i.key.job_id for i in (*plan.launches, *plan.stops, *ended)])
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
                    if item.launch.datasets:  # once per attempt and role: `yard job` says what it read
                        self._record_datasets(session, task, item.launch, now)
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
            if whole:  # every running task is in the plan: forget the pulls of those that ended
                self._pull_recorded &= {item.key for item in plan.running}
            for item in plan.running:
                status = statuses.get(item.key)
                if status is not None and status.image_pull and item.key not in self._pull_recorded:
                    self._record_image_pull(session, item, status, now)
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
            del loaded
        if self.timings is not None:  # once the write has committed: a rolled-back start did not happen
            for seconds in first_starts:
                self.timings.start_latency.observe(max(0.0, seconds))
        return changed

    def _record_datasets(self, session: Session, task: TaskRow, launch: TaskLaunch, now: datetime) -> None:
        event = transitions.datasets_read(launch.key.attempt, task.role,
                                          [(d.name, d.version, d.target) for d in launch.datasets], now)
        if not any(e.kind == event.kind and e.message == event.message for e in job_events(session, task.job_id)):
            record_event(session, task.job_id, event)

    def _record_image_pull(self, session: Session, item: ActiveTask, status: TaskStatus, now: datetime) -> None:
        """Once per task run: in the job's events, how its image came to its node. A restarted
        controller finds the event already there."""
        task = job_queries.task_by_id(session, item.task_id)
        self._pull_recorded.add(item.key)
        if task is None or task.run != item.key.run:
            return
        event = transitions.image_pulled(task, status.image_pull, now)
        if not any(e.kind == event.kind and e.message == event.message for e in job_events(session, task.job_id)):
            record_event(session, task.job_id, event)

    def _task_ended(self, session: Session, task: TaskRow, status: TaskStatus, now: datetime) -> None:
        job = job_queries.job_by_id(session, task.job_id)
        assert job is not None
        attempt = current_attempt(job)
        running = (job.state == JobState.RUNNING and attempt is not None and attempt.id == task.attempt_id
                   and attempt.state == AttemptState.RUNNING)
        finished = False  # a worker told to restart for a resize that had finished its work
        if task.restart:
            task.restart = False
            finished = status.exit_code == 0
            # Stopped for its elastic job's resize: it starts again at the new size, with the
            # others. One that ended before the stop was sent, or finished its work (exit 0)
            # as it came, keeps its own outcome, and one whose job is no longer running
            # (stopped, preempted meanwhile) ends STOPPED.
            if task.stop_sent and running and status.exit_code != 0:
                task.stop_sent = False
                transitions.task_restarted(task)
                return
        exit_info = classify_exit(status.exit_code)
        # The backend's note may repeat the signal the description already names.
        notes = [n for n in (status.message or "").split("; ") if n and n not in exit_info.description]
        detail = exit_info.description + (f" ({'; '.join(notes)})" if notes else "")
        if status.reason == OUT_OF_MEMORY and not task.stop_sent:
            detail = out_of_memory_message(task.memory_mb, status.exit_code)
        if status.reason == DATASET_UNAVAILABLE and status.message:
            detail = status.message  # it names the dataset and says why; its exit status would mislead
        unavailable = status.reason == IMAGE_UNAVAILABLE and not task.stop_sent and status.exit_code != 0
        if unavailable:
            detail = image_unavailable_message(status.message)
        if task.stop_sent and not finished:
            new_state = TaskState.STOPPED
            if task.removed:
                detail = f"left as its elastic job shrank ({detail})"
            elif status.exit_code == SUSPENDED_EXIT_CODE:
                detail = f"saved its state and stopped as asked (exit {SUSPENDED_EXIT_CODE}: suspended)"
        elif status.exit_code == 0:
            new_state = TaskState.SUCCEEDED
        elif status.exit_code is None:
            # Nobody knows how it ended: not its failure. Not re-run in place either: the
            # attempt decides (core/lifecycle: a platform retry).
            new_state = TaskState.LOST
            self.lost += 1
        else:
            spec = self.spec_of(job)
            retry_count = spec.taskRoles[task.role].taskRetryCount
            if not unavailable and task_should_rerun(status.exit_code, task.run - task.resizes + 1, retry_count):
                event = transitions.task_rerun(task, status.exit_code, detail, retry_count, self.clock.now())
                record_event(session, job.id, event)
                return
            new_state = TaskState.FAILED
        event = transitions.task_ended(
            task, new_state, status.exit_code, detail, ended_at(task, status, now), self.clock.now()
        )
        record_event(session, job.id, event)
        if running and job.elastic_max is not None and new_state in (TaskState.FAILED, TaskState.LOST) \
                and attempt is not None:
            # An elastic job's worker beyond its minimum lost on its own: the others go on
            # at the smaller size (a shrink), rather than wait on it for ever.
            lost_worker(session, job, attempt, task, self.spec_of(job), self.clock)

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
        interrupted = {AttemptState.PREEMPTED: "preemption", AttemptState.SUSPENDED: "suspension"}
        if attempt.state in interrupted and TaskState.STOPPED not in states.values():
            # Every task ended on its own before its stop was sent: the job's own outcome
            # stands, and a job preempted just as it finished is not run again.
            what = interrupted[AttemptState(attempt.state)]
            self._complete(job, attempt, states, f" (it ended before its {what} took effect)")
        now = self.clock.now()
        ends = [t.finished_at for t in attempt.tasks if t.finished_at is not None]
        transitions.attempt_ended(attempt, max(ends) if ends else None, now)
        job.attained_gpu_seconds = (job.attained_gpu_seconds or 0.0) + attained_gpu_seconds(attempt)
        if job.state == JobState.STOPPING:
            record_event(session, job.id, transitions.stopped(job, attempt, now))
            return True
        if attempt.state == AttemptState.SUSPENDED:
            # Waits SUSPENDED to resume as a new attempt, keeping its place; no retry spent.
            saved = sum(1 for t in attempt.tasks if t.state == TaskState.STOPPED and t.exit_code == SUSPENDED_EXIT_CODE)
            record_event(session, job.id, transitions.suspended(job, attempt, saved, len(attempt.tasks), now))
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
            # A pull that cannot succeed would fail the same way again: no retry is spent on it.
            unavailable = any(t.state == TaskState.FAILED and is_image_unavailable(t.message) for t in attempt.tasks)
            if not unavailable and job_should_retry(attempt.exit_code, job.retries_used, spec.jobRetryCount):
                record_event(session, job.id, transitions.retry_failed(job, attempt, spec.jobRetryCount, now))
                return True
            why = failure_why(attempt)
            message = attempt.reason if not why or why in (attempt.reason or "") else f"{attempt.reason}; {why}"
            record_event(session, job.id, transitions.fail(job, attempt, message, now))
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
        if outcome == AttemptState.LOST and (why := lost_why(attempt)):
            reason += f" ({why})"  # what the backend knew: the job's events say why it is retried
        if outcome == AttemptState.LOST and not platform_retry_due(a.state for a in job.attempts):
            outcome = AttemptState.FAILED
            reason += f"; its {MAX_PLATFORM_RETRIES} platform retries are used up, so this counts as a failure"
        failed = [t.exit_code for t in attempt.tasks if t.state == TaskState.FAILED]
        failed += [t.exit_code for t in attempt.tasks if t.state == TaskState.LOST]
        if outcome == AttemptState.FAILED and (oom := out_of_memory_task(attempt)) is not None:
            reason += f"; {oom}"  # the attempt's and the job's message name the limit
        transitions.complete_attempt(attempt, outcome, reason, failed[0] if failed else 0)


def attained_gpu_seconds(attempt: AttemptRow) -> float:
    """The GPU-seconds an ended attempt received: the GPUs each task held, for as long as it
    held them (an elastic job's workers join and leave during the attempt)."""
    if attempt.started_at is None or attempt.finished_at is None:
        return 0.0
    if attempt.job.elastic_max is None:  # every task held its GPUs the whole attempt
        gpus = sum(milli for task in attempt.tasks for _, milli in task.gpus) / 1000
        return gpus * max(0.0, (attempt.finished_at - attempt.started_at).total_seconds())
    total = 0.0
    for task in attempt.tasks:
        if task.started_at is None:
            continue  # never ran (a worker grown, then stopped before it was launched)
        start = max(task.started_at, attempt.started_at)
        end = min(task.finished_at or attempt.finished_at, attempt.finished_at)
        total += sum(milli for _, milli in task.gpus) / 1000 * max(0.0, (end - start).total_seconds())
    return total


def failure_why(attempt: AttemptRow) -> str:
    """Why a failed attempt failed, in words: its exit status, or, when no task has one,
    what the backend knew (a task whose supervisor could not start says why); nothing when
    no task failed at all (Trainyard ended the attempt: the hang watchdog), since the
    attempt's reason already says it; and what the backend said of the task that failed
    with it (its image could not be pulled)."""
    if attempt.exit_code is None:
        failed = [t for t in attempt.tasks if t.state in (TaskState.FAILED, TaskState.LOST)]
        if not failed:
            return ""
        unknown = [t for t in failed if t.exit_code is None]
        if unknown and unknown[0].message:
            return f"task {unknown[0].role}/{unknown[0].index}: {unknown[0].message}"
    if (oom := out_of_memory_task(attempt)) is not None:
        return oom
    described = classify_exit(attempt.exit_code).description
    told = [t for t in attempt.tasks if t.state == TaskState.FAILED and t.exit_code == attempt.exit_code
            and t.message and t.message != described]
    return f"task {told[0].role}/{told[0].index}: {told[0].message}" if told else described


def lost_why(attempt: AttemptRow) -> str:
    """``task ROLE/INDEX: WHY`` for the attempt's first lost task whose backend said why
    (a port held on its node, Slurm's NODE_FAIL), else ""."""
    bare = classify_exit(None).description
    for task in attempt.tasks:
        message = task.message or ""
        if task.state == TaskState.LOST and message.startswith(f"{bare} (") and message.endswith(")"):
            return f"task {task.role}/{task.index}: {message[len(bare) + 2:-1]}"
    return ""


def out_of_memory_task(attempt: AttemptRow) -> str | None:
    """``task ROLE/INDEX OUT_OF_MEMORY: ...`` for the first failed task of the attempt the
    kernel killed at its memory limit; None when none was."""
    for task in attempt.tasks:
        if task.state == TaskState.FAILED and is_out_of_memory(task.message):
            return f"task {task.role}/{task.index} {task.message}"
    return None


def ended_at(task: TaskRow, status: TaskStatus, now: datetime) -> datetime:
    """When the task ended: the backend's record if it has a believable one (after the task
    started, not after now), else now."""
    when = status.finished_at
    if when is None or when > now or (task.started_at is not None and when < task.started_at):
        return now
    return when
