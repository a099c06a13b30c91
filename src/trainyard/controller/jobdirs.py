"""Removing job directories once their jobs have ended and the retention has passed; and
the admin's cap on a running job's directory (``job_dir_max_mb``).

A job's directory (``$TRAINYARD_JOB_DIR``, see ``backends.base.JobDirectories``) outlives
its attempts, so that a retried or preempted job resumes from what it saved there; after
the job has ended it is kept ``job_dir_retention_seconds`` more (to fetch results or
checkpoints from), then removed here. A directory whose job the store does not know is
left alone: it may belong to another store's server on a shared directory.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from trainyard.backends.base import JobDirectories
from trainyard.controller.periodic import Periodic
from trainyard.controller.reconcile import current_attempt
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.states import JobState
from trainyard.services import workdirs
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import jobs as job_queries

log = logging.getLogger(__name__)

# How often the directories are looked at: removal is housekeeping, not urgent.
SWEEP_INTERVAL_SECONDS = 60.0
# How often running jobs' directories are measured against the cap: a walk is capped
# (``backends.jobdirs``), so this bounds what measuring costs, and how far past the cap a
# job can write before it is stopped (what it writes in this long).
CAP_INTERVAL_SECONDS = 30.0
STOPPED_BY = "trainyard"


class JobDirSweeper(Periodic):
    """Removes the directories of jobs that ended more than ``retention_seconds`` ago.

    The controller calls ``start_if_due`` every cycle; a due sweep runs in a thread of its
    own (``Periodic``), since removing a tree of millions of files may take minutes the
    scheduling cycle must not wait for. One sweep at a time.
    """

    thread_name = "trainyard-job-dir-sweep"

    def __init__(
        self,
        db: Database,
        backend: JobDirectories,
        clock: Clock,
        retention_seconds: float,
        *,
        interval: float = SWEEP_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.backend = backend
        self.retention = timedelta(seconds=retention_seconds)

    def run_logged(self) -> None:
        try:
            self.sweep()
        except Exception:  # noqa: BLE001 - a failed sweep is retried at the next interval
            log.exception("sweeping the job directories failed")

    def sweep(self) -> list[int]:
        """Remove the expired directories now; the ids of the jobs whose directories went."""
        # Read, then remove outside the session: deleting a large tree can take a while.
        candidates = self.backend.job_dir_ids()
        if not candidates:
            return []
        with self.db.session() as session:
            expired = job_queries.jobs_ended_by(session, candidates, self.clock.now() - self.retention)
        removed = []
        for job_id in expired:
            try:
                self.backend.remove_job_dir(job_id)
            except OSError as error:  # one stubborn directory must not stop the others
                log.warning("could not remove the directory of job %s: %s", job_id, error)
                continue
            removed.append(job_id)
        if removed:
            log.info("removed the job directories of ended job(s) %s", ", ".join(map(str, removed)))
        return removed


class JobDirCap(Periodic):
    """Stops a running job whose directory holds more than ``max_bytes`` (the admin's
    ``job_dir_max_mb``): measured every ``interval``, as ``yard job`` shows it; the stop's
    message names the size and the cap. The directory is kept, for its owner to fetch or
    clean up what is there, and removed with the retention as any other."""

    thread_name = "trainyard-job-dir-cap"

    def __init__(self, db: Database, backend: JobDirectories, clock: Clock, max_bytes: int, *,
                 interval: float = CAP_INTERVAL_SECONDS) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.backend = backend
        self.max_bytes = max_bytes

    def run_logged(self) -> None:
        try:
            self.check()
        except Exception:  # noqa: BLE001 - a failed check is tried again at the next interval
            log.exception("checking the job directories against job_dir_max_mb failed")

    def check(self) -> list[int]:
        """Stop the running jobs whose directories are over the cap now; their ids."""
        with self.db.session() as session:
            running = set(job_queries.job_ids_in(session, [JobState.RUNNING]))
        over = {}
        for job_id in sorted(running & set(self.backend.job_dir_ids())):  # measured outside any session
            usage = self.backend.job_dir_usage(job_id)
            if usage is not None and usage.bytes > self.max_bytes:
                over[job_id] = usage.bytes
        stopped = []
        for job_id, used in over.items():
            with self.db.session() as session:
                job = job_queries.job_by_id(session, job_id, full=True)
                if job is None or job.state != JobState.RUNNING:
                    continue
                because = (f"its job directory holds {used / (1 << 20):,.0f} MB, over the cluster's cap of "
                           f"{self.max_bytes >> 20:,} MB (job_dir_max_mb)")
                for event in transitions.request_stop(job, current_attempt(job), STOPPED_BY, self.clock.now(),
                                                      because=because):
                    record_event(session, job.id, event)
                stopped.append(job_id)
        if stopped:
            log.warning("stopped job(s) %s: job directory over job_dir_max_mb", ", ".join(map(str, stopped)))
        return stopped


class WorkdirSweeper(Periodic):
    """Forgets uploaded working directories no job runs in after a day, and removes the
    archives no upload holds any more (``services.workdirs.sweep``)."""

    thread_name = "trainyard-workdir-sweep"

    def __init__(self, db: Database, store: WorkdirStore, clock: Clock, *,
                 interval: float = SWEEP_INTERVAL_SECONDS) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.store = store

    def run_logged(self) -> None:
        try:
            with self.db.session() as session:
                removed = workdirs.sweep(session, self.store, self.clock)
            if removed:
                log.info("removed %d working-directory archive(s) no job runs in", removed)
        except Exception:  # noqa: BLE001 - retried at the next interval
            log.exception("sweeping the working directories failed")
