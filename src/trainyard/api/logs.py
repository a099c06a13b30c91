"""Finding which task log a request means, and reading the tail of it."""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.api.deps import AppContext
from trainyard.backends.base import Backend, TaskKey
from trainyard.core.states import FINAL_JOB_STATES, AttemptState, TaskState
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid, NotFound
from trainyard.store.rows import UserRow

TAIL_BYTES_PER_LINE = 512


@dataclass(frozen=True)
class LogTarget:
    job_id: int
    user: UserRow
    role: str
    index: int
    attempt: int | None
    key: TaskKey | None  # None: the task has not been placed yet
    ended: bool

    @property
    def label(self) -> str:
        return f"{self.role}/{self.index}"

    def refresh(self, ctx: AppContext) -> LogTarget:
        return find_log_target(ctx, self.user, self.job_id, self.label, self.attempt)


def find_log_target(
    ctx: AppContext, user: UserRow, job_id: int, task: str | None, attempt: int | None
) -> LogTarget:
    with ctx.db.session() as session:
        job = job_service.get_job(session, user, job_id, full=True)
        spec = ctx.specs.of(job)
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
            return LogTarget(job_id, user, role, index, attempt, None, job.state in FINAL_JOB_STATES)
        found = [t for t in rows[0].tasks if (t.role, t.index) == (role, index)]
        if not found:
            return LogTarget(job_id, user, role, index, attempt, None, True)
        t = found[0]
        key = TaskKey(job.id, number, role, index, t.run)
        ended = TaskState(t.state).is_final or (t.state == TaskState.WAITING and rows[0].state != AttemptState.RUNNING)
        return LogTarget(job_id, user, role, index, attempt, key, ended)


def read_tail(backend: Backend, key: TaskKey, lines: int) -> tuple[int, bytes, int]:
    """The last ``lines`` lines of a task's log: (start offset, data, log size)."""
    if lines == 0:
        chunk = backend.read_log(key, 0, 0)
        return chunk.size, b"", chunk.size
    chunk = backend.read_log(key, -max(65536, lines * TAIL_BYTES_PER_LINE), 1 << 24)
    data = chunk.data
    body = data[:-1] if data.endswith(b"\n") else data
    parts = body.split(b"\n")
    if len(parts) > lines:
        cut = len(b"\n".join(parts[:-lines])) + 1
        return chunk.offset + cut, data[cut:], chunk.size
    return chunk.offset, data, chunk.size
