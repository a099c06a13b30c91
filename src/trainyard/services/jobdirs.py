"""A job directory's disk use as the API shows it: measured on demand, briefly cached.

The walk is capped (``backends.jobdirs.MAX_USAGE_ENTRIES``) and its answer kept for a
while in proportion to what it cost (at least ``MIN_CACHE_SECONDS``), so that clients
polling a job (``yard wait``, the portal) spend at most about 1/``COST_FACTOR`` of a core
walking a large directory, while a small one's figure stays fresh.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from trainyard.backends.base import Backend, DirUsage, JobDirectories
from trainyard.core.clock import Clock
from trainyard.core.states import JobState
from trainyard.schemas.jobs import JobDirView

MIN_CACHE_SECONDS = 2.0
COST_FACTOR = 20.0  # a walk that took 0.5 s is trusted for 10 s
CACHE_ENTRIES = 1024


class JobDirUsage:
    """Answers ``JobDetail.jobDir`` for the jobs of one backend."""

    def __init__(self, backend: Backend, clock: Clock, retention_seconds: float) -> None:
        self._dirs = backend if isinstance(backend, JobDirectories) else None
        self._clock = clock
        self._retention = timedelta(seconds=retention_seconds)
        self._lock = threading.Lock()
        # job id -> (monotonic time it expires, wall time measured, usage); a job without
        # a directory is not kept: its directory may be made any moment, and looking is cheap.
        self._cache: dict[int, tuple[float, datetime, DirUsage]] = {}

    def view(self, job_id: int, state: JobState, finished_at: datetime | None) -> JobDirView | None:
        """The directory's disk use; None when the backend keeps no job directories or the
        job has none."""
        if self._dirs is None:
            return None
        # A figure measured while the job ran is stale once it has ended: what its last
        # moments wrote counts (a client that waits for the end then reads the size).
        ended = finished_at if state.is_final else None
        measured_at, usage = self._measure(job_id, self._dirs, not_before=ended)
        if usage is None:
            return None
        return JobDirView(
            bytes=usage.bytes,
            files=usage.files,
            complete=usage.complete,
            measuredAt=measured_at,
            removeAfter=finished_at + self._retention if state.is_final and finished_at is not None else None,
        )

    def _measure(self, job_id: int, dirs: JobDirectories,
                 not_before: datetime | None = None) -> tuple[datetime, DirUsage | None]:
        now = self._clock.monotonic()
        with self._lock:
            cached = self._cache.get(job_id)
        if cached is not None and now < cached[0] and (not_before is None or cached[1] >= not_before):
            return cached[1], cached[2]
        started = time.perf_counter()  # what the walk costs, not what time it is
        usage = dirs.job_dir_usage(job_id)  # outside the lock: a walk may take a moment
        cost = time.perf_counter() - started
        measured_at = self._clock.now()
        with self._lock:
            self._cache.pop(job_id, None)
            if usage is not None:
                if len(self._cache) >= CACHE_ENTRIES:
                    del self._cache[min(self._cache, key=lambda k: self._cache[k][0])]
                self._cache[job_id] = (now + max(MIN_CACHE_SECONDS, COST_FACTOR * cost), measured_at, usage)
        return measured_at, usage
