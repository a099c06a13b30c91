"""The contract between the controller and whatever actually runs tasks.

A backend is deliberately small: report the inventory, launch a task (idempotently, by
its key), say what its launched tasks are doing, signal them, and read their logs. The
controller owns every decision; a backend never changes job state by itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from trainyard.core.metrics import Sampled


@dataclass(frozen=True)
class GpuInfo:
    """One GPU device of a node."""

    index: int
    model: str
    memory_mb: int
    uuid: str | None = None
    simulated: bool = False
    # The PCIe/NUMA group the device sits in (e.g. "numa0"), from NVML or configuration;
    # "" when unknown. The topology scorer keeps a multi-GPU task inside one group.
    group: str = ""


@dataclass(frozen=True)
class NodeInventory:
    """What a node offers to the scheduler."""

    name: str
    address: str
    cpu_milli: int
    memory_mb: int
    gpus: tuple[GpuInfo, ...] = ()
    schedulable: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskKey:
    """Identifies one run of one task; launching the same key twice starts it once.

    ``run`` counts in-place task retries (``taskRetryCount``) within one attempt.
    """

    job_id: int
    attempt: int
    role: str
    index: int
    run: int = 0

    def __str__(self) -> str:
        return f"{self.job_id}/{self.attempt}/{self.role}/{self.index}/{self.run}"

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        job_id, attempt, role, index, run = text.split("/")
        return cls(int(job_id), int(attempt), role, int(index), int(run))


TASK_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_task_key(key: TaskKey) -> None:
    """Raise ValueError unless every part of ``key`` is safe to use in a path."""
    for field_name in ("job_id", "attempt", "index", "run"):
        value = getattr(key, field_name)
        if type(value) is not int or value < 0:
            raise ValueError(f"task key {field_name} must be a non-negative int, got {value!r}")
    if not isinstance(key.role, str) or not TASK_ROLE.fullmatch(key.role):
        raise ValueError(f"task role {key.role!r} must match {TASK_ROLE.pattern}")


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task on one node."""

    key: TaskKey
    node: str
    script: str  # the task's commands, one per line, run by bash
    env: Mapping[str, str]
    gpus: tuple[int, ...] = ()  # device indices on the node; empty for CPU-only tasks
    grace_seconds: float = 30.0
    # What the scheduler reserved for the task. The local backend needs none of it; a
    # backend that asks a cluster manager for resources (Slurm) requests exactly this.
    cpu_milli: int = 0
    memory_mb: int = 0
    gpu_milli: tuple[int, ...] = ()  # the share of each GPU in ``gpus`` (1000 = whole)
    # Whose task it is: the job owner's Trainyard user name. The local backend runs the
    # task as that user's OS account when it maps users to accounts.
    user: str = ""
    # The job's secrets by name, as text; the local backend hands each to the task as a
    # file only it can read ($TRAINYARD_SECRETS_DIR/<name>).
    secrets: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskStatus:
    """What the backend knows of a launched task.

    ``running`` is True while the task's process is alive. Once it has ended,
    ``exit_code`` holds its exit status (128 + N when killed by signal N, as a shell
    reports it) and ``signal`` the signal number when one killed it. ``lost`` means the
    backend has no trace of the task at all (never launched, or its state was deleted).
    """

    key: TaskKey
    running: bool
    exit_code: int | None = None
    signal: int | None = None
    lost: bool = False
    message: str = ""
    finished_at: datetime | None = None  # when it ended, if the backend recorded it (UTC)


@dataclass(frozen=True)
class LogChunk:
    """A slice of a task's combined stdout+stderr log."""

    data: bytes
    offset: int  # where ``data`` starts in the log
    size: int  # the log's total size when read


class Backend(Protocol):
    """What every backend provides. Optional capabilities are separate protocols."""

    name: str

    def inventory(self) -> list[NodeInventory]:
        """The nodes and devices this backend can run tasks on, as of now."""
        ...

    def allocate_ports(self, node: str, count: int) -> list[int]:
        """Ports free on ``node`` for a task to listen on (best effort, not reserved)."""
        ...

    def launch(self, task: TaskLaunch) -> None:
        """Start the task; a second call with the same key does nothing."""
        ...

    def observe(self, keys: Iterable[TaskKey]) -> dict[TaskKey, TaskStatus]:
        """The status of each given task; every key gets an answer."""
        ...

    def stop(self, key: TaskKey, grace_seconds: float) -> None:
        """SIGTERM the task's process group, SIGKILL it after ``grace_seconds``.

        Safe to call on a task that has already ended, and more than once.
        """
        ...

    def read_log(self, key: TaskKey, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        """Up to ``limit`` bytes of the task's log from ``offset``; a negative offset
        counts from the end (``-4096`` = the last 4 KiB)."""
        ...


@dataclass(frozen=True)
class DirUsage:
    """The disk use of a directory tree, as ``du`` counts it (allocated blocks).

    ``complete`` is False when the walk stopped at its cap on entries: the tree holds at
    least this much.
    """

    bytes: int
    files: int
    complete: bool = True


@runtime_checkable
class JobDirectories(Protocol):
    """Optional capability: a directory per job that outlives its attempts.

    Every task of every attempt of the job sees the same directory as
    ``$TRAINYARD_JOB_DIR``, created before its first task starts, so that a retried or
    preempted job can resume from what it saved there. The controller removes it once the
    job has ended and the retention has passed (``controller/jobdirs.py``).
    """

    def job_dir_usage(self, job_id: int) -> DirUsage | None:
        """The disk use of the job's directory; None when it has none (yet, or any more)."""
        ...

    def job_dir_ids(self) -> list[int]:
        """The ids of the jobs that have a directory now."""
        ...

    def remove_job_dir(self, job_id: int) -> None:
        """Delete the job's directory and everything in it (nothing when it has none)."""
        ...


@runtime_checkable
class GangLauncher(Protocol):
    """Optional capability: start the tasks of one attempt together, as one unit.

    A backend that runs on a cluster manager (Slurm) has it, so that a gang is one
    allocation that starts all at once or not at all, never tasks that may start apart.
    The controller then hands it every task of an attempt it launches in one call.
    """

    def launch_gang(self, tasks: Sequence[TaskLaunch]) -> None:
        """Start these tasks (all of one job attempt) together; idempotent by task key."""
        ...


def read_log_file(path: Path, offset: int, limit: int) -> LogChunk:
    """``Backend.read_log`` over a plain log file (missing = empty): the shared implementation."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            f.seek(start)
            # Read no further than the size reported, so data and size agree.
            data = f.read(max(0, min(limit, size - start)))
    except FileNotFoundError:  # launched, but the task has not written anything yet
        return LogChunk(data=b"", offset=0, size=0)
    return LogChunk(data=data, offset=start, size=size)


@runtime_checkable
class MetricsSource(Protocol):
    """Optional capability: samples of the backend's nodes and of its running tasks.

    The controller asks for a round every ``monitor_interval_seconds`` and hands it to
    the history (``monitor/``). ``running`` names the tasks the controller believes are
    running, with the GPUs each holds, so that a backend can attribute processes and GPU
    use to them; a task the backend cannot measure is simply left out of the answer.
    """

    def sample(self, now: datetime, running: Mapping[TaskKey, tuple[int, ...]]) -> Sampled:
        """One round of samples, taken now; never raises for a figure it cannot get (it
        leaves it None and may say why in ``Sampled.errors``)."""
        ...
