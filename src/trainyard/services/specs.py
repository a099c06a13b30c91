"""The one cache of parsed job files: each stored job's spec, validated once.

The controller (every cycle, for every job it acts on) and the API (``GET /jobs/{id}``,
logs) need a job's ``JobSpec``; validating the stored document costs far more than
reading it, so both share one ``StoredSpecs`` (``api/server.py`` hands the controller's to
the API). An entry is kept under the job's id with the row's ``version``: a stored job
file does not change after submit, and should a row be rewritten anyway its version
moves and the document is parsed again. The cache is bounded (least recently used go
first), so an API reading old jobs cannot grow it without end.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from trainyard.spec.loading import validate_job
from trainyard.spec.models import JobSpec
from trainyard.store.rows import JobRow

DEFAULT_CAPACITY = 10_000


class StoredSpecs:
    """Parsed job files by job id and row version, shared by the controller's thread and
    the API's; a lock guards the entries (not the parsing: a race only parses twice)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[int, tuple[int, JobSpec]] = OrderedDict()
        self._lock = threading.Lock()

    def parse(self, job_id: int, version: int, data: dict[str, Any]) -> JobSpec:
        """The job's spec; raises ``SpecError`` if its stored document no longer validates."""
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and entry[0] == version:
                self._entries.move_to_end(job_id)
                return entry[1]
        spec = validate_job(data)
        with self._lock:
            self._entries[job_id] = (version, spec)
            self._entries.move_to_end(job_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return spec

    def of(self, job: JobRow) -> JobSpec:
        return self.parse(job.id, job.version, job.spec)

    def known(self, job_id: int) -> JobSpec | None:
        """The spec last parsed for the job, if it is still kept."""
        with self._lock:
            entry = self._entries.get(job_id)
        return None if entry is None else entry[1]

    def __len__(self) -> int:
        return len(self._entries)
