"""The hang watchdog: an attempt none of whose tasks has written output for its job's
``watchdogSeconds`` is ended as hung (HAI Platform's ``set_watchdog_time``).

The attempt becomes LOST (``transitions.hang``); reconcile then stops its tasks with the
job's grace period and requeues the job as after any platform fault: a new attempt that
spends none of ``jobRetryCount``. Past ``MAX_PLATFORM_RETRIES`` lost attempts a hung one
counts as FAILED, and ``jobRetryCount`` decides as for any failure.

What counts as output:

1. a running task's log (stdout and stderr together, ``Backend.read_log``) has grown since
   the watchdog last looked;
2. a run of a task appears that the watchdog has not seen in an attempt it already watches
   (a task re-run in place, ``taskRetryCount``, starts a fresh log);
3. the attempt has no running task at all (not launched yet, or between two runs), or a
   running one has no log yet (its node has not started it: a Slurm job still queued in
   Slurm's own queue): nothing of it runs, so nothing of it can hang;
4. a log cannot be read: a watchdog that cannot see must not end a job.

When the silence starts: at the attempt's start. What the watchdog knows is kept in memory
only (each task run's last log size, when each attempt last showed output), so after a
controller restart the silence of an attempt already running starts at the controller's
start instead: a restart gives every watched attempt a whole ``watchdogSeconds`` again,
rather than ending one as hung for output written while nobody looked.

The watchdog looks every ``check_seconds`` on the controller's clock: a hang is found at
most that long after ``watchdogSeconds`` has passed, and output is credited to the look that
sees it (up to ``check_seconds`` late, never early), so the error is always in the job's
favour. One look reads one byte of each running task's log (its size comes with it).

Phases, as reconcile's: read the watched attempts (one short transaction), read the log
sizes outside any transaction, then end the hung attempts in one transaction, each checked
to be still its job's running attempt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from trainyard.backends.base import Backend, TaskKey
from trainyard.controller.reconcile import current_attempt
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.lifecycle import platform_retry_due
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries

log = logging.getLogger(__name__)

WATCHDOG_CHECK_SECONDS = 5.0  # well under spec.models.MIN_WATCHDOG_SECONDS (10)

AttemptId = tuple[int, int]  # (job id, attempt number)
NOT_STARTED = -1  # a log size: the task has no log yet (``LogChunk.exists``)


@dataclass
class WatchedAttempt:
    """A running attempt of a job with a ``watchdogSeconds``, as the store has it."""

    limit: int  # watchdogSeconds
    started_at: datetime | None
    running: list[TaskKey] = field(default_factory=list)  # its running task runs


@dataclass(frozen=True)
class Hang:
    """An attempt found silent for at least its limit."""

    job_id: int
    attempt: int
    silent_for: float  # seconds
    limit: int


class Watchdog:
    """Finds hung attempts and ends them; called by the controller's loop every cycle
    (``end_hung_attempts_if_due``), in its one thread, as every job state change is."""

    def __init__(self, db: Database, backend: Backend, clock: Clock,
                 check_seconds: float = WATCHDOG_CHECK_SECONDS) -> None:
        self.db = db
        self.backend = backend
        self.clock = clock
        self.check_seconds = check_seconds
        self.started_at = clock.now()  # silence before this was not watched (a restart)
        self._last_check: float | None = None
        self._sizes: dict[TaskKey, int] = {}  # each watched task run's log size at the last look
        self._last_output: dict[AttemptId, datetime] = {}  # when each watched attempt last showed output

    def end_hung_attempts_if_due(self) -> list[int]:
        """``end_hung_attempts`` when ``check_seconds`` have passed since the last look."""
        mono = self.clock.monotonic()
        if self._last_check is not None and mono - self._last_check < self.check_seconds:
            return []
        self._last_check = mono
        return self.end_hung_attempts()

    def end_hung_attempts(self) -> list[int]:
        """Look at every watched attempt now; mark the hung ones (LOST, or FAILED past the
        platform retries) and return their jobs."""
        with self.db.session() as session:
            watched = watched_attempts(job_queries.watched_attempt_tasks(session))
        hangs = self.find_hangs(watched, {key: self._log_size(key) for w in watched.values() for key in w.running})
        if not hangs:
            return []
        with self.db.session() as session:
            return end_hung(session, hangs, self.clock.now())

    def find_hangs(self, watched: dict[AttemptId, WatchedAttempt], sizes: dict[TaskKey, int | None]) -> list[Hang]:
        """Note the output ``sizes`` (None: unreadable; ``NOT_STARTED``: no log yet) shows
        and return the attempts silent for their limit; forgets the attempts and task runs no
        longer watched."""
        now = self.clock.now()
        seen_sizes: dict[TaskKey, int] = {}
        last_output: dict[AttemptId, datetime] = {}
        hangs = []
        for (job_id, number), attempt in watched.items():
            known = (job_id, number) in self._last_output
            since = self._last_output.get((job_id, number)) or max(attempt.started_at or now, self.started_at)
            if not attempt.running:
                since = now
            for key in attempt.running:
                size, before = sizes.get(key), self._sizes.get(key)
                if size is None or size == NOT_STARTED or (before is None and known) or size > (before or 0):
                    since = now
                seen_sizes[key] = (before or 0) if size is None or size == NOT_STARTED else size
            last_output[(job_id, number)] = since
            silent_for = (now - since).total_seconds()
            if silent_for >= attempt.limit:
                hangs.append(Hang(job_id, number, silent_for, attempt.limit))
        self._sizes, self._last_output = seen_sizes, last_output
        return hangs

    def _log_size(self, key: TaskKey) -> int | None:
        """The size of the task's log; ``NOT_STARTED`` when it has none yet; None: unreadable."""
        try:
            chunk = self.backend.read_log(key, offset=-1, limit=1)
            return chunk.size if chunk.exists else NOT_STARTED
        except Exception:  # noqa: BLE001 - an unreadable log must not end the job, nor stop the loop
            log.warning("cannot read the log of %s; counting it as output", key, exc_info=True)
            return None


def watched_attempts(rows: list[job_queries.WatchedTask]) -> dict[AttemptId, WatchedAttempt]:
    """The query's rows (one per task) grouped by attempt."""
    watched: dict[AttemptId, WatchedAttempt] = {}
    for job_id, number, started_at, limit, role, index, run, state in rows:
        attempt = watched.setdefault((job_id, number), WatchedAttempt(limit, started_at))
        if state == TaskState.RUNNING:
            attempt.running.append(TaskKey(job_id, number, role, index, run))
    return watched


def end_hung(session: Session, hangs: list[Hang], now: datetime) -> list[int]:
    """Mark each hung attempt LOST (FAILED once the job's platform retries are spent) and
    record why; an attempt that ended or was stopped since it was looked at is left alone."""
    ended = []
    for hang in hangs:
        job = job_queries.job_by_id(session, hang.job_id)
        if job is None or job.state != JobState.RUNNING or job.attempt != hang.attempt:
            continue
        attempt = current_attempt(job)
        if attempt is None or attempt.state != AttemptState.RUNNING:
            continue
        retry_due = platform_retry_due(a.state for a in job.attempts)
        record_event(session, job.id, transitions.hang(job, attempt, hang.silent_for, hang.limit, retry_due, now))
        log.info("job %s attempt %s hung: no output for %.0f s", job.id, attempt.number, hang.silent_for)
        ended.append(job.id)
    return ended
