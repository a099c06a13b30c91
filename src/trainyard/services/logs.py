"""A task's log as the API serves it: which task and attempt a request means, the bytes to
send (from an offset, or the last lines), and following the log until the task ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from anyio.to_thread import run_sync

from trainyard.backends.base import Backend, LogChunk, TaskKey
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid, NotFound
from trainyard.services.specs import StoredSpecs
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

TAIL_BYTES_PER_LINE = 512
FOLLOW_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class LogTarget:
    """The task whose log a request means, and whether more of it can still come."""

    job_id: int
    user: UserRow
    role: str
    index: int
    attempt: int | None  # as asked; None: the job's latest attempt, whichever that is when read
    key: TaskKey | None  # None: the task has not been placed yet
    ended: bool

    @property
    def label(self) -> str:
        return f"{self.role}/{self.index}"


@dataclass(frozen=True)
class TaskLogs:
    """Where task logs are found: the store (which task), the parsed job files, the backend."""

    db: Database
    specs: StoredSpecs
    backend: Backend

    def find(self, user: UserRow, job_id: int, task: str | None, attempt: int | None) -> LogTarget:
        return find_log_target(self.db, self.specs, user, job_id, task, attempt)

    def refresh(self, target: LogTarget) -> LogTarget:
        """The same task looked up again: placed since, re-run in place, or ended."""
        return self.find(target.user, target.job_id, target.label, target.attempt)

    def read(self, key: TaskKey, *, offset: int | None, tail: int | None) -> LogChunk:
        return read_log(self.backend, key, offset=offset, tail=tail)

    def follow(self, target: LogTarget, offset: int, first: bytes = b"") -> AsyncIterator[bytes]:
        return follow_log(self, target, offset, first)


def find_log_target(
    db: Database, specs: StoredSpecs, user: UserRow, job_id: int, task: str | None, attempt: int | None
) -> LogTarget:
    """The task ``task`` (``ROLE/INDEX``; default: the first role's first instance) of the
    job's attempt ``attempt`` (default: the latest), as ``user`` may see it."""
    with db.session() as session:
        job = job_service.get_job(session, user, job_id, full=True)
        spec = specs.of(job)
        if task is None:
            role, index = spec.role_names[0], 0
        else:
            role, _, idx = task.partition("/")
            valid = idx.isascii() and idx.isdigit() and len(idx) < 7
            if role not in spec.taskRoles or not valid or int(idx) >= spec.taskRoles[role].instances:
                choices = ", ".join(f"{r}/0..{spec.taskRoles[r].instances - 1}" for r in spec.role_names)
                raise Invalid(f"job {job_id} has no task {task!r}; tasks are {choices}",
                              details=[{"path": "task", "message": "unknown task"}])
            index = int(idx)
        number = job.attempt if attempt is None else attempt
        rows = [a for a in job.attempts if a.number == number]
        if not rows:
            if attempt is not None:
                raise NotFound(f"job {job_id} has no attempt {attempt}")
            return LogTarget(job_id, user, role, index, attempt, None, JobState(job.state).is_final)
        found = [t for t in rows[0].tasks if (t.role, t.index) == (role, index)]
        if not found:
            return LogTarget(job_id, user, role, index, attempt, None, True)
        t = found[0]
        key = TaskKey(job.id, number, role, index, t.run)
        ended = TaskState(t.state).is_final or (t.state == TaskState.WAITING and rows[0].state != AttemptState.RUNNING)
        return LogTarget(job_id, user, role, index, attempt, key, ended)


def read_log(backend: Backend, key: TaskKey, *, offset: int | None, tail: int | None) -> LogChunk:
    """The last ``tail`` lines of a task's log if asked, else the log from ``offset``."""
    if tail is not None:
        return read_tail(backend, key, tail)
    return backend.read_log(key, offset or 0)


def read_tail(backend: Backend, key: TaskKey, lines: int) -> LogChunk:
    """The last ``lines`` lines of a task's log."""
    if lines == 0:
        chunk = backend.read_log(key, 0, 0)
        return LogChunk(b"", chunk.size, chunk.size)
    chunk = backend.read_log(key, -max(65536, lines * TAIL_BYTES_PER_LINE), 1 << 24)
    data = chunk.data
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.split(b"\n")
    if len(parts) > lines:
        cut = len(b"\n".join(parts[:-lines])) + 1
        return LogChunk(data[cut:], chunk.offset + cut, chunk.size)
    return chunk


async def follow_log(logs: TaskLogs, target: LogTarget, offset: int, first: bytes = b"") -> AsyncIterator[bytes]:
    """New log bytes as they appear, from ``offset``; ends once the task has ended and all of
    its log is read. Blocking reads run in worker threads, off the event loop."""
    if first:
        yield first
        offset += len(first)
    while True:
        previous = target.key
        target = await run_sync(logs.refresh, target)
        if target.key != previous:
            offset = 0  # the task was re-run in place: a new log begins
        if target.key is not None:
            chunk = await run_sync(logs.backend.read_log, target.key, offset)
            if chunk.data:
                yield chunk.data
                offset = chunk.offset + len(chunk.data)
                continue
        if target.ended:
            return
        await anyio.sleep(FOLLOW_POLL_SECONDS)
