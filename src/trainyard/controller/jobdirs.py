"""Removing job directories once their jobs have ended and the retention has passed.

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
from trainyard.core.clock import Clock
from trainyard.store.db import Database
from trainyard.store.queries import jobs as job_queries

log = logging.getLogger(__name__)

# How often the directories are looked at: removal is housekeeping, not urgent.
SWEEP_INTERVAL_SECONDS = 60.0


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
