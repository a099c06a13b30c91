"""A job directory's disk use as the API shows it: measured on demand, briefly cached.

The walk is capped (``backends.jobdirs.MAX_USAGE_ENTRIES``) and its answer kept for
``CACHE_SECONDS``, so that clients polling a job (``yard wait``, the portal) do not walk a
large directory on every request.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from trainyard.backends.base import Backend, DirUsage, JobDirectories
from trainyard.core.clock import Clock
from trainyard.core.states import JobState
from trainyard.schemas.jobs import JobDirView

CACHE_SECONDS = 30.0
CACHE_ENTRIES = 1024


class JobDirUsage:
    """Answers ``JobDetail.jobDir`` for the jobs of one backend."""

    def __init__(self, backend: Backend, clock: Clock, retention_seconds: float) -> None:
        self._dirs = backend if isinstance(backend, JobDirectories) else None
        self._clock = clock
        self._retention = timedelta(seconds=retention_seconds)
        self._lock = threading.Lock()
        # job id -> (monotonic time measured, wall time measured, usage)
        self._cache: dict[int, tuple[float, datetime, DirUsage | None]] = {}

    def view(self, job_id: int, state: JobState, finished_at: datetime | None) -> JobDirView | None:
        """The directory's disk use; None when the backend keeps no job directories or the
        job has none."""
        if self._dirs is None:
            return None
        measured_at, usage = self._measure(job_id, self._dirs)
        if usage is None:
            return None
        return JobDirView(
            bytes=usage.bytes,
            files=usage.files,
            complete=usage.complete,
            measuredAt=measured_at,
            removeAfter=finished_at + self._retention if state.is_final and finished_at is not None else None,
        )

    def _measure(self, job_id: int, dirs: JobDirectories) -> tuple[datetime, DirUsage | None]:
        now = self._clock.monotonic()
        with self._lock:
            cached = self._cache.get(job_id)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1], cached[2]
        usage = dirs.job_dir_usage(job_id)  # outside the lock: a walk may take a moment
        measured_at = self._clock.now()
        with self._lock:
            if len(self._cache) >= CACHE_ENTRIES:
                oldest = min(self._cache, key=lambda k: self._cache[k][0])
                del self._cache[oldest]
            self._cache[job_id] = (now, measured_at, usage)
        return measured_at, usage
