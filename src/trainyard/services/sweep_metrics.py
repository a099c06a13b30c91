"""A sweep member's metric, as ``yard sweep show`` and the sweep's page show it.

Two kinds, as the sweep's ``metric`` names:

- ``{pattern: REGEX}``: the last line of the member's first task's log (its latest attempt
  that ran) that the pattern matches; the value is the first group (the whole match
  without groups). Only the log's last ``TAIL_BYTES`` are searched.

An ended job's metric cannot change: it is kept (``ENDED_KEPT`` of them, the oldest
forgotten first), so that a sweep's page polled every few seconds reads the logs and files
of its live jobs alone.
- ``{name: NAME}``: the value the job last reported with ``runtime.report(NAME=…)``,
  which writes ``<job dir>/.trainyard/metrics.json``. The server reads that file without
  following links (the directory is the job's to write), at most ``MAX_REPORT_BYTES``.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any

import regex

from trainyard.backends.base import TaskKey
from trainyard.core.states import FINAL_JOB_STATES
from trainyard.services.server import Server
from trainyard.store.rows import JobRow

TAIL_BYTES = 64 * 1024
MAX_LINE_CHARS = 4096  # of a log line, searched
PATTERN_BUDGET_SECONDS = 0.5  # of a pattern's searches, per reader (one view of a sweep)
ENDED_KEPT = 20_000
MAX_REPORT_BYTES = 64 * 1024
MAX_VALUE_CHARS = 64
REPORT_DIR = ".trainyard"
REPORT_FILE = "metrics.json"  # runtime.report's file, in REPORT_DIR


# Per store (a test process has many): (job id, metric) -> its value once the job has ended.
_ended: weakref.WeakKeyDictionary[object, OrderedDict[tuple[int, str], str | None]] = weakref.WeakKeyDictionary()
_ended_lock = threading.Lock()


class MetricReader:
    """Reads one sweep's metric of each of its members."""

    def __init__(self, server: Server, metric: dict[str, Any]) -> None:
        self._server = server
        pattern = metric.get("pattern")
        self._pattern = regex.compile(pattern) if isinstance(pattern, str) else None
        # What the pattern may cost this reader, all members together: a user's pattern may
        # backtrack for ever ("(a+)+$"), so each search is timed out and released from the
        # interpreter lock, and once the budget is spent the rest show no value.
        self._deadline = time.monotonic() + PATTERN_BUDGET_SECONDS
        name = metric.get("name")
        self._name = name if isinstance(name, str) else None
        self._kind = json.dumps(metric, sort_keys=True)

    def value(self, job: JobRow) -> str | None:
        """The member's metric now; None while it has shown none."""
        if job.state not in FINAL_JOB_STATES:
            return self._read(job)
        key = (job.id, self._kind)
        with _ended_lock:
            kept = _ended.setdefault(self._server.db, OrderedDict())
            if key in kept:
                kept.move_to_end(key)
                return kept[key]
        found = self._read(job)
        with _ended_lock:
            kept[key] = found
            while len(kept) > ENDED_KEPT:
                kept.popitem(last=False)
        return found

    def _read(self, job: JobRow) -> str | None:
        try:
            if self._pattern is not None:
                return self._from_log(job)
            if self._name is not None:
                return self._from_report(job)
        except (OSError, ValueError, RecursionError):
            return None  # not there (yet, or any more), or not JSON we can read: nothing to show
        return None

    def _from_log(self, job: JobRow) -> str | None:
        assert self._pattern is not None
        key = _first_task(job)
        if key is None:
            return None
        backend = self._server.backend
        size = backend.read_log(key, 0, 0).size
        start = max(0, size - TAIL_BYTES)
        text = backend.read_log(key, start, size - start).data.decode("utf-8", "replace")
        for line in reversed(text.splitlines()):
            left = self._deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                found = self._pattern.search(line[:MAX_LINE_CHARS], timeout=left, concurrent=True)
            except TimeoutError:
                return None
            if found:
                return _short(found.group(1) if found.re.groups else found.group(0))
        return None

    def _from_report(self, job: JobRow) -> str | None:
        # Both backends keep job directories as ``backends.jobdirs.JobDirTree`` (``job_dir``);
        # one without that method has no directory to read.
        job_dir = getattr(self._server.backend, "job_dir", None)
        if not callable(job_dir):
            return None
        values = json.loads(_read_no_links(str(job_dir(job.id)), (REPORT_DIR, REPORT_FILE)))
        if not isinstance(values, dict) or self._name not in values:
            return None
        value = values[self._name]
        return _short(value if isinstance(value, str) else json.dumps(value))


def _first_task(job: JobRow) -> TaskKey | None:
    """The first task (first role, index 0) of the job's latest attempt that placed tasks."""
    roles = list((job.spec or {}).get("taskRoles") or {})
    for attempt in sorted(job.attempts, key=lambda a: a.number, reverse=True):
        tasks = sorted(attempt.tasks, key=lambda t: (roles.index(t.role) if t.role in roles else len(roles), t.index))
        if tasks:
            first = tasks[0]
            return TaskKey(job.id, attempt.number, first.role, first.index, first.run)
    return None


def _read_no_links(root: str, names: tuple[str, ...]) -> bytes:
    """The file ``root/names…``, opened one component at a time without following a link."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(root, flags | getattr(os, "O_DIRECTORY", 0))
    try:
        for name in names[:-1]:
            inner = os.open(name, flags | getattr(os, "O_DIRECTORY", 0), dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open(names[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    finally:
        os.close(fd)
    try:
        info = os.fstat(leaf)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:  # a hard link may be to a file not the job's
            raise ValueError("not a plain file of its own")
        data = os.read(leaf, MAX_REPORT_BYTES + 1)
    finally:
        os.close(leaf)
    if len(data) > MAX_REPORT_BYTES:
        raise ValueError("report too large")
    return data


def _short(value: str) -> str:
    value = " ".join(value.split())
    return value if len(value) <= MAX_VALUE_CHARS else value[: MAX_VALUE_CHARS - 1] + "…"
