"""Task runs and monitoring rows written straight into a real store, at known times, for the
usage-accounting tests (services, API, CLI): what the controller would have left behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.store.rows import AttemptRow, JobRow, TaskRow, TaskSampleRow, UserRow

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(hours: float, seconds: float = 0) -> datetime:
    """``hours`` (and ``seconds``) after T0."""
    return T0 + timedelta(hours=hours, seconds=seconds)


@dataclass
class Run:
    """One task of one attempt: what it held, from when to when (``end`` None: running)."""

    start: datetime
    end: datetime | None
    gpus: list[list[int]] = field(default_factory=lambda: [[0, 1000]])
    cpu_milli: int = 1000
    memory_mb: int = 1024
    role: str = "m"
    index: int = 0


def add_job(
    session: Session, user: UserRow | str, attempts: list[list[Run]], *, vc: str = "default", name: str = "j",
    job_id: int | None = None,
) -> int:
    """A job (or, with ``job_id``, an existing one) whose attempts ran these tasks; RUNNING
    while a task runs, else SUCCEEDED."""
    running = any(r.end is None for runs in attempts for r in runs)
    if job_id is None:
        owner = user if isinstance(user, UserRow) else None
        assert owner is not None
        job = JobRow(name=name, user_id=owner.id, vc=vc, priority="normal", state=JobState.WAITING, spec={},
                     submitted_at=T0)
        session.add(job)
        session.flush()
    else:
        found = session.get(JobRow, job_id)
        assert found is not None
        job = found
    for number, runs in enumerate(attempts):
        attempt = AttemptRow(job_id=job.id, number=number,
                             state=AttemptState.RUNNING if running else AttemptState.SUCCEEDED,
                             started_at=min(r.start for r in runs),
                             finished_at=None if running else max(r.end or r.start for r in runs))
        session.add(attempt)
        session.flush()
        for run in runs:
            session.add(TaskRow(
                attempt_id=attempt.id, job_id=job.id, role=run.role, index=run.index,
                state=TaskState.RUNNING if run.end is None else TaskState.SUCCEEDED, node="n1", gpus=run.gpus,
                cpu_milli=run.cpu_milli, memory_mb=run.memory_mb, ports={}, started_at=run.start,
                finished_at=run.end,
            ))
    job.submitted_at = min(r.start for runs in attempts for r in runs) - timedelta(minutes=1)
    job.attempt = len(attempts) - 1
    job.state = JobState.RUNNING if running else JobState.SUCCEEDED
    job.started_at = min(r.start for runs in attempts for r in runs)
    job.finished_at = None if running else max(r.end or r.start for runs in attempts for r in runs)
    session.flush()
    return job.id


def add_sample(
    session: Session, job_id: int, when: datetime, *, step: int = 0, attempt: int = 0, gpus_held: float = 1.0,
    gpu_util_pct: float | None = None, cpu_cores: float | None = None, role: str = "m", index: int = 0,
) -> None:
    session.add(TaskSampleRow(job_id=job_id, attempt=attempt, role=role, index=index, node="n1", at=when, step=step,
                              gpus_held=gpus_held, gpu_util_pct=gpu_util_pct, cpu_cores=cpu_cores))
