"""The API's models of jobs: what a submission answers, a job's summary and detail, a page
of jobs, and the headers that frame a task's log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from trainyard.core import jobfile
from trainyard.core.lifecycle import MAX_PLATFORM_RETRIES
from trainyard.core.logreads import LOG_ATTEMPT_HEADER as LOG_ATTEMPT_HEADER
from trainyard.core.logreads import LOG_MAX_PAGE_BYTES as LOG_MAX_PAGE_BYTES
from trainyard.core.logreads import LOG_OFFSET_HEADER as LOG_OFFSET_HEADER
from trainyard.core.logreads import LOG_PAGE_BYTES as LOG_PAGE_BYTES
from trainyard.core.logreads import LOG_RUN_HEADER as LOG_RUN_HEADER
from trainyard.core.logreads import LOG_SIZE_HEADER as LOG_SIZE_HEADER
from trainyard.core.logreads import LOG_TASK_HEADER as LOG_TASK_HEADER
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.schemas.workdirs import WorkdirView


class PendingView(BaseModel):
    """Why a waiting job waits; only a WAITING job has one."""

    reason: str  # NO_FIT, BEHIND, QUOTA, USER_QUOTA, RESERVED, PREEMPTING, BORROW_LIMIT, PORTS, DEPENDENCY, SWEEP_LIMIT
    message: str
    short: str = ""  # the message in a few words, as the ``yard jobs`` table shows it
    position: int | None = None  # 1-based place among the waiting jobs of its VC
    estimatedStart: datetime | None = None  # when derivable from declared run times


class TaskView(BaseModel):
    role: str
    index: int
    state: TaskState
    node: str
    gpus: list[int]
    gpu: float
    cpu: float
    memoryMB: int
    ports: dict[str, list[int]]
    run: int
    exitCode: int | None
    message: str
    startedAt: datetime | None
    finishedAt: datetime | None

    @property
    def label(self) -> str:
        """``ROLE/INDEX``, as ``--task`` and the log's task header name it."""
        return f"{self.role}/{self.index}"


class SizeView(BaseModel):
    """An elastic job's number of workers from ``at`` on (until the next one, or the attempt's end)."""

    at: datetime
    workers: int


class AttemptView(BaseModel):
    number: int
    state: AttemptState
    startedAt: datetime | None
    finishedAt: datetime | None
    exitCode: int | None
    reason: str
    tasks: list[TaskView]
    borrowed: bool = False  # it ran over its VC's quota, on borrowed GPUs
    # An elastic job's size over the attempt: as it started, then after each resize ([] for a
    # job of fixed size, or an attempt not started).
    sizes: list[SizeView] = []


class JobSummary(BaseModel):
    id: int
    name: str
    user: str
    vc: str
    priority: str
    state: JobState
    attempt: int
    submittedAt: datetime
    startedAt: datetime | None
    finishedAt: datetime | None
    exitCode: int | None
    pending: PendingView | None
    gpus: float
    message: str
    # Seconds its attempts ran, summed (queue time is not run time); None before it first ran.
    runtimeSeconds: float | None = None
    # Who keeps it SUSPENDED until `yard resume` (None: nobody holds it).
    heldBy: str | None = None
    # Its current attempt runs on borrowed GPUs: over its VC's quota, on other VCs' idle ones,
    # reclaimed (suspended if it can be, else requeued) when the lending VC needs them.
    borrowed: bool = False


class SubmitResult(BaseModel):
    id: int
    name: str
    user: str
    vc: str
    priority: str
    state: JobState
    submittedAt: datetime
    warnings: list[str]


class DryRunResult(BaseModel):
    """A job file that would be accepted, as Trainyard would run it (secrets masked)."""

    dryRun: bool = True
    valid: bool = True
    job: dict[str, Any]
    warnings: list[str]
    # Each role's image as it is pulled and run: a short name in full, as Docker reads it
    # (``python:3.11-slim`` is ``docker.io/library/python:3.11-slim``); roles without one left out.
    images: dict[str, str] = {}


class EventView(BaseModel):
    at: datetime
    kind: str
    message: str


class JobDirView(BaseModel):
    """The job's directory ($TRAINYARD_JOB_DIR), kept across its attempts: its disk use."""

    bytes: int  # allocated on disk, as ``du`` counts
    files: int
    complete: bool  # False: the count stopped at its cap on entries; the directory holds at least this
    measuredAt: datetime
    removeAfter: datetime | None  # once the job has ended: when the server removes the directory


class DependencyView(BaseModel):
    """One job this job waits for (the job file's ``dependencies``)."""

    condition: str  # afterok, afterany, afternotok
    job: int
    state: JobState | None  # None: no such job any more
    status: str  # waiting (it has not ended), met, never (it ended in a way the condition excludes)


class JobDetail(JobSummary):
    retriesUsed: int
    # Lost attempts retried as platform faults, which spend no jobRetryCount, and the most a job gets.
    platformRetriesUsed: int = 0
    platformRetriesMax: int = MAX_PLATFORM_RETRIES
    gracePeriodSeconds: float
    spec: dict[str, Any]
    attempts: list[AttemptView]
    events: list[EventView]
    warnings: list[str] = []
    jobDir: JobDirView | None = None  # None: the job has no directory (not started yet, or removed)
    dependencies: list[DependencyView] = []  # the jobs it waits for (or waited for), with their states
    # The working directory it was sent with (`yard submit` from a project folder), if any.
    workdir: WorkdirView | None = None

    def task_labels(self) -> list[str]:
        """Every task of its job file and every task an attempt ran (an elastic role's grown
        workers), ROLE/INDEX, as the log routes name them."""
        return jobfile.task_labels(self.spec, ((t.role, t.index) for a in self.attempts for t in a.tasks))


class JobPage(BaseModel):
    items: list[JobSummary]
    next: int | None  # pass as ``before`` to get the next page; None on the last page
