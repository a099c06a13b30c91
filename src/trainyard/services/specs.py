"""The one cache of parsed job files: each stored job's spec, validated once.

The controller (every cycle, for every job it acts on) and the API (``GET /jobs/{id}``,
logs) need a job's ``JobSpec``; validating the stored document costs far more than
reading it, so both share one ``StoredSpecs`` (``api/server.py`` hands the controller's to
the API). An entry is kept under the job's id with the document it was parsed from, and
is used only for an equal document (comparing them costs microseconds, a validation about
a millisecond). Not the row's ``version``: it moves with every change of the job's state,
so a job placed, launched and ended was parsed again at each step (issue 33's profile of
the live server: a tenth of the controller's reconciling); and a job id is not always a
job: a row refused after its insert (a clone the backend cannot run) is rolled back, and
SQLite gives its id, with the same first version, to the next job. The cache is bounded
(least recently used go first), so an API reading old jobs cannot grow it without end.
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
        self._entries: OrderedDict[int, tuple[dict[str, Any], JobSpec]] = OrderedDict()
        self._lock = threading.Lock()

    def parse(self, job_id: int, data: dict[str, Any]) -> JobSpec:
        """The job's spec; raises ``SpecError`` if its stored document no longer validates.
        ``data`` is kept with it (not copied: a stored document is never changed in place)."""
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and entry[0] == data:
                self._entries.move_to_end(job_id)
                return entry[1]
        spec = validate_job(data)
        with self._lock:
            self._entries[job_id] = (data, spec)
            self._entries.move_to_end(job_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return spec

    def of(self, job: JobRow) -> JobSpec:
        return self.parse(job.id, job.spec)

    def known(self, job_id: int) -> JobSpec | None:
        """The spec last parsed for the job, if it is still kept."""
        with self._lock:
            entry = self._entries.get(job_id)
        return None if entry is None else entry[1]

    def __len__(self) -> int:
        return len(self._entries)
