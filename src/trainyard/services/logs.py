"""A task's log as the API serves it: which task and attempt a request means, the page of
bytes to send (from an offset, or from where the last lines begin), and following the log
until the task ends or the server shuts down.

A log of any size is read in pages: a page holds at most ``limit`` bytes and, unless it
reaches the end of the log, ends at the end of a line (a single line longer than a page is
the exception), so that pages read one after another are exactly the log and each is whole
lines."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace

import anyio
from anyio.to_thread import run_sync

from trainyard.backends.base import Backend, LogChunk, TaskKey
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.schemas.jobs import LOG_PAGE_BYTES
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid, NotFound
from trainyard.services.specs import StoredSpecs
from trainyard.spec.models import JobSpec
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

TAIL_BLOCK_BYTES = 1 << 16  # how far back each read goes when looking for the last lines
FOLLOW_POLL_SECONDS = 0.25  # also the longest a follower takes to notice the server closing


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
    """Where task logs are found: the store (which task), the parsed job files, the backend;
    and ``closing``, set when the server shuts down, which ends every follower."""

    db: Database
    specs: StoredSpecs
    backend: Backend
    closing: threading.Event = field(default_factory=threading.Event)

    def find(self, user: UserRow, job_id: int, task: str | None, attempt: int | None,
             run: int | None = None) -> LogTarget:
        return find_log_target(self.db, self.specs, user, job_id, task, attempt, run)

    def refresh(self, target: LogTarget) -> LogTarget:
        """The same task looked up again: placed since, re-run in place, or ended."""
        return self.find(target.user, target.job_id, target.label, target.attempt)

    def read(self, key: TaskKey, *, offset: int | None, tail: int | None, limit: int = LOG_PAGE_BYTES) -> LogChunk:
        return read_log(self.backend, key, offset=offset, tail=tail, limit=limit)

    def follow(self, target: LogTarget, offset: int, first: bytes = b"") -> AsyncIterator[bytes]:
        return follow_log(self, target, offset, first)

    def whole(self, key: TaskKey) -> Iterator[bytes]:
        return whole_log(self.backend, key)


def task_named(spec: JobSpec, job_id: int, task: str) -> tuple[str, int]:
    """The role and index of ``task`` (``ROLE/INDEX``) in the job; 422 (on ``task``) naming
    the job's tasks when it has no such task."""
    role, _, idx = task.partition("/")
    valid = idx.isascii() and idx.isdigit() and len(idx) < 7
    # An elastic role's workers may have any index: those grown after others left take new ones.
    if (role not in spec.taskRoles or not valid
            or (int(idx) >= spec.taskRoles[role].instances and not spec.taskRoles[role].elastic)):
        choices = ", ".join(f"{r}/0..{spec.taskRoles[r].instances - 1}" for r in spec.role_names)
        raise Invalid(f"job {job_id} has no task {task!r}; tasks are {choices}",
                      details=[{"path": "task", "message": "unknown task"}])
    return role, int(idx)


# ``find_log_target``'s ``run`` for the run before the latest (``kubectl logs --previous``).
PREVIOUS = -1


def find_log_target(
    db: Database, specs: StoredSpecs, user: UserRow, job_id: int, task: str | None, attempt: int | None,
    run: int | None = None,
) -> LogTarget:
    """The task ``task`` (``ROLE/INDEX``; default: the first role's first instance) of the
    job's attempt ``attempt`` (default: the latest), as ``user`` may see it; ``run``: which of
    its runs in that attempt (``taskRetryCount`` re-runs a failed task in place, an elastic
    resize restarts it; default: the latest, ``PREVIOUS`` the one before it)."""
    target = find_log_targets(db, specs, user, job_id, [task], attempt)[0]
    if run is None or target.key is None:
        if run is not None:
            raise NotFound(f"task {target.label} of job {job_id} has not run in this attempt yet")
        return target
    latest = target.key.run
    wanted = latest - 1 if run == PREVIOUS else run
    if not 0 <= wanted <= latest:
        runs = "once" if latest == 0 else f"{latest + 1} times (runs 0 to {latest})"
        raise NotFound(f"task {target.label} of job {job_id} has run {runs} in attempt {target.key.attempt}"
                       + ("; there is no run before it" if run == PREVIOUS else ""))
    if wanted == latest:
        return target
    return replace(target, key=replace(target.key, run=wanted), ended=True)  # an earlier run has ended


def find_log_targets(
    db: Database, specs: StoredSpecs, user: UserRow, job_id: int, tasks: list[str | None] | None,
    attempt: int | None
) -> list[LogTarget]:
    """`find_log_target` for each of ``tasks`` (None: every task of the job file and every
    task its attempt ran, role by role, index by index), read in one look at the store."""
    with db.session() as session:
        job = job_service.get_job(session, user, job_id, full=True)
        spec = specs.of(job)
        if tasks is None:
            wanted = [(role, i) for role in spec.role_names for i in range(spec.taskRoles[role].instances)]
        else:
            wanted = [(spec.role_names[0], 0) if task is None else task_named(spec, job_id, task) for task in tasks]
        number = job.attempt if attempt is None else attempt
        rows = [a for a in job.attempts if a.number == number]
        earlier = not rows and attempt is None and bool(job.attempts)
        if earlier:
            # Its next attempt has not started (a job waiting to resume, or to run again):
            # the latest one that did, whose log is the one worth reading; a follower goes on
            # to the next attempt's once that starts.
            rows = [max(job.attempts, key=lambda a: a.number)]
            number = rows[0].number
        if not rows:
            if attempt is not None:
                raise NotFound(f"job {job_id} has no attempt {attempt}")
            final = JobState(job.state).is_final
            return [LogTarget(job_id, user, role, index, attempt, None, final) for role, index in wanted]
        placed = {(t.role, t.index): t for t in rows[0].tasks}
        if tasks is None:  # and the workers an elastic role grew (beyond its minimum)
            order = {role: n for n, role in enumerate(spec.role_names)}
            wanted = sorted(set(wanted) | placed.keys(), key=lambda task: (order.get(task[0], len(order)), task[1]))
        targets = []
        for role, index in wanted:
            t = placed.get((role, index))
            if t is None:
                targets.append(LogTarget(job_id, user, role, index, attempt, None, True))
                continue
            key = TaskKey(job.id, number, role, index, t.run)
            ended = TaskState(t.state).is_final or (
                t.state == TaskState.WAITING and rows[0].state != AttemptState.RUNNING)
            if earlier:
                ended = JobState(job.state).is_final
            targets.append(LogTarget(job_id, user, role, index, attempt, key, ended))
        return targets


def read_log(backend: Backend, key: TaskKey, *, offset: int | None, tail: int | None,
             limit: int = LOG_PAGE_BYTES) -> LogChunk:
    """A page of a task's log: from where its last ``tail`` lines begin if asked, else from
    ``offset``."""
    start = tail_offset(backend, key, tail) if tail is not None else offset or 0
    return read_page(backend, key, start, limit)


def read_page(backend: Backend, key: TaskKey, offset: int, limit: int) -> LogChunk:
    """Up to ``limit`` bytes from ``offset``, ending at a line's end unless the page reaches
    the end of the log or holds no line's end at all."""
    chunk = backend.read_log(key, offset, limit)
    data = chunk.data
    if chunk.offset + len(data) < chunk.size:
        cut = data.rfind(b"\n") + 1
        if cut:
            return LogChunk(data[:cut], chunk.offset, chunk.size)
    return chunk


def tail_offset(backend: Backend, key: TaskKey, lines: int) -> int:
    """Where the last ``lines`` lines of a task's log begin (a last line without its newline
    is still a line), read back from the end a block at a time whatever the log's size."""
    end = backend.read_log(key, 0, 0).size  # the log as it is now; it only grows
    if lines == 0:
        return end
    position = end
    wanted = lines  # line ends still to pass, going back
    while position > 0:
        start = max(0, position - TAIL_BLOCK_BYTES)
        block = backend.read_log(key, start, position - start).data
        if position == end and block.endswith(b"\n"):
            block = block[:-1]  # the last line's own end starts no further line
        found = len(block)
        while wanted:
            found = block.rfind(b"\n", 0, found)
            if found < 0:
                break
            wanted -= 1
        if not wanted:
            return start + found + 1
        position = start
    return 0


def whole_log(backend: Backend, key: TaskKey, page_bytes: int = LOG_PAGE_BYTES) -> Iterator[bytes]:
    """The log as it is now, from its first byte to its size when asked, a page at a time: a
    log of any size is sent whole while the server holds one page of it at most."""
    end = backend.read_log(key, 0, 0).size
    offset = 0
    while offset < end:
        chunk = backend.read_log(key, offset, min(page_bytes, end - offset))
        if not chunk.data:
            return  # shorter than it was (removed meanwhile): what there was is sent
        yield chunk.data
        offset += len(chunk.data)


async def follow_log(logs: TaskLogs, target: LogTarget, offset: int, first: bytes = b"") -> AsyncIterator[bytes]:
    """New log bytes as they appear, from ``offset``; ends once the task has ended and all of
    its log is read, or once the server is closing (``logs.closing``: a follower must not
    hold a stopping server up). Blocking reads run in worker threads, off the event loop."""
    if first:
        yield first
        offset += len(first)
    while not logs.closing.is_set():
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
