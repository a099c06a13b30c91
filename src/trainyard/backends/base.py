"""The contract between the controller and whatever actually runs tasks.

A backend is deliberately small: report the inventory, launch a task (idempotently, by
its key), say what its launched tasks are doing, signal them, and read their logs. The
controller owns every decision; a backend never changes job state by itself.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
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
class Mount:
    """A path of the node the task sees: a storage (``target`` inside a container; for a
    bare process the task is given ``source``'s path), read-only when ``read_only``."""

    source: str  # on the node
    target: str  # where the job asked for it (inside a container)
    read_only: bool = False
    name: str = ""  # the storage's name, for messages and $TRAINYARD_STORAGE_<NAME>
    # Non-zero for a user's home or a group's storage: the backend makes ``source`` when it
    # is missing, with this mode, owned by the task's account.
    create_mode: int = 0
    # The storage's own path (the admin's), when ``source`` is a subPath inside it ("": the
    # same as ``source``). A sandbox opens the subPath from it without following links.
    root: str = ""

    @property
    def sub_path(self) -> str:
        """``source`` relative to ``root`` ("" for the whole storage)."""
        if not self.root or self.root == self.source:
            return ""
        if not self.source.startswith(self.root.rstrip("/") + "/"):
            raise ValueError(f"storage {self.name!r}: {self.source} is not inside {self.root}")
        return self.source[len(self.root.rstrip("/")) + 1:]


@dataclass(frozen=True)
class DatasetFetch:
    """A dataset a task reads (issue 35): the node's cache fetches it (``backends/datacache``)
    before the task starts, once per ``key``, and the task sees it read-only at ``target``."""

    name: str
    source: str  # an http(s) URL, or a folder on the node (a storage's, resolved by the server)
    version: str
    target: str  # where the task finds it (its mountPath)
    sha256: str = ""  # the archive's, checked when given
    storage_root: str = ""  # for a folder: the storage's own path, which it is opened from
    # For a folder: the Trainyard user (the dataset's owner) whose task account's permissions
    # the copy honours: root copies only what that account could read itself.
    reader: str = ""

    @property
    def key(self) -> str:
        """The cache entry's name: a new source or version is a new entry, never a stale one
        (nor, for a folder, one copied with another reader's permissions)."""
        parts = (self.name, self.source, self.version, self.sha256, *((self.reader,) if self.storage_root else ()))
        text = "\0".join(parts)
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


@dataclass(frozen=True)
class PythonEnvironment:
    """The Python environment (``yard env``) a task runs in: ``prefix`` becomes
    ``$VIRTUAL_ENV`` and ``bin_dirs`` (its own bin, then its base's) go first on ``PATH``,
    over the base and the site's layers and under the job's own env
    (``backends/environment.py``). The backend makes the prefix visible to the task."""

    prefix: str
    bin_dirs: tuple[str, ...]


# Where a task finds its job's working directory's archive (``TaskLaunch.workdir_archive``),
# in the folder of its suspend request: the account's to read, nobody's to replace.
WORKDIR_VARIABLE = "TRAINYARD_WORKDIR_ARCHIVE"
WORKDIR_ARCHIVE_NAME = "workdir.tar.gz"


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
    # The container image to run the task in (None: a bare process, as before).
    image: str | None = None
    # The storages the task sees (``Mount``), checked against its owner's grants at submit.
    mounts: tuple[Mount, ...] = ()
    # Every storage's path on the node (all admins' storages, the home and group roots): a
    # sandbox hides them all and binds back only ``mounts`` (grants enforced by the platform).
    storage_paths: tuple[str, ...] = ()
    # The Python environment the task runs in (None: the node's own, as before).
    environment: PythonEnvironment | None = None
    # The ports the task was given on its node (its own, and the job's MASTER_PORT for the
    # first task of the first role): a backend that cannot probe the node when it allocates
    # them (Slurm) checks them free where the task starts.
    ports: tuple[int, ...] = ()
    # The job's working directory (``core.workdirs``' canonical archive, gzip'd, a file the
    # server holds): the backend hands it to the task ($TRAINYARD_WORKDIR_ARCHIVE, the
    # account's, read-only) and the task's script unpacks it in its working directory.
    workdir_archive: str | None = None
    # A worker of an elastic job's elastic role: a resize adds, stops or restarts it alone,
    # while the job's other tasks go on (a backend that runs a gang as one unit, Slurm,
    # runs such a task as a unit of its own).
    elastic: bool = False
    # The datasets the task reads from its node's cache (``DatasetFetch``), read-only.
    datasets: tuple[DatasetFetch, ...] = ()


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
    # Why it ended, when the backend knows better than the exit status: "OUT_OF_MEMORY" (the
    # kernel killed it at its memory limit, seen in its cgroup), else "".
    reason: str = ""
    # How the task's image came to its node, once known ("pulled IMAGE on node X in 12.3 s",
    # "IMAGE already on node X", or why the pull failed); "" for a task without an image. The
    # controller records it in the job's events once.
    image_pull: str = ""


@dataclass(frozen=True)
class NodeImage:
    """An image a node holds."""

    node: str
    image: str  # repository:tag ("<none>" parts when untagged)
    id: str
    size_bytes: int
    created_at: datetime | None = None  # when the image was made (a pulled image: by its author)
    pulled_at: datetime | None = None  # when Trainyard last pulled it there (None: not Trainyard)


@dataclass(frozen=True)
class ImagePull:
    """How an image came to a node: pulled (in ``seconds``) or already there; or the error."""

    node: str
    image: str
    pulled: bool
    seconds: float
    error: str = ""

    @property
    def note(self) -> str:
        """The job event's words."""
        if self.error:
            return self.error
        if self.pulled:
            return f"pulled {self.image} on node {self.node} in {self.seconds:.1f} s"
        return f"{self.image} already on node {self.node}"


@dataclass(frozen=True)
class ImageRemoval:
    """What evicting an image did on one node: removed, not there, or the error (``in_use``:
    the engine refused because a container there uses it)."""

    node: str
    image: str
    removed: bool
    error: str = ""
    in_use: bool = False

    @property
    def note(self) -> str:
        if self.error:
            return self.error
        if self.removed:
            return f"removed {self.image} from node {self.node}"
        return f"{self.image} not on node {self.node}"


@runtime_checkable
class ImageCache(Protocol):
    """Optional capability: the container images each node holds, and pulling one ahead of
    the jobs that need it (OpenPAI's image cache): a job whose image is already on its node
    starts without waiting for the pull."""

    def node_images(self) -> list[NodeImage]:
        """Every image every node holds, as of now."""
        ...

    def pull_image(self, image: str, node: str | None = None) -> list[ImagePull]:
        """Pull ``image`` to ``node`` (None: every node), unless it is there; one answer per node."""
        ...

    def remove_image(self, image: str, node: str | None = None) -> list[ImageRemoval]:
        """Remove ``image`` from ``node`` (None: every node) where it is; one answer per node."""
        ...


@dataclass(frozen=True)
class CacheEntry:
    """A dataset a node's cache holds (``backends/datacache``); times are Unix seconds."""

    dataset: str
    version: str
    key: str
    size: int
    files: int
    fetched_at: float | None
    last_used_at: float | None
    in_use: int  # running tasks that mount it


@dataclass(frozen=True)
class NodeDatasetCache:
    """One node's dataset cache: its capacity, contents and counters since it was made."""

    node: str
    capacity_bytes: int
    used_bytes: int
    hits: int
    misses: int
    bytes_fetched: int
    evictions: int
    entries: tuple[CacheEntry, ...]
    fetch_failures: int = 0  # fetches that failed (their bytes count in bytes_fetched)


@runtime_checkable
class DatasetCaches(Protocol):
    """Optional capability: each node keeps the datasets its tasks read (issue 35)."""

    def dataset_caches(self) -> list[NodeDatasetCache]:
        """Every node's cache, as of now."""
        ...

    def prefetch(self, datasets: Sequence[DatasetFetch], node: str | None = None) -> None:
        """Fetch ``datasets`` into ``node``'s cache (None: every node's) ahead of the tasks
        that will read them; slow (call it outside any transaction), raising nothing: a
        failed prefetch is logged, and the task's own fetch tries again."""
        ...


@dataclass(frozen=True)
class LogChunk:
    """A slice of a task's combined stdout+stderr log."""

    data: bytes
    offset: int  # where ``data`` starts in the log
    size: int  # the log's total size when read
    # False: there is no log yet: the task has not started (its node opens the log as it
    # starts it; a Slurm job still queued in Slurm has none), or the key names no task.
    exists: bool = True


class Backend(Protocol):
    """What every backend provides. Optional capabilities are separate protocols."""

    name: str

    def inventory(self) -> list[NodeInventory]:
        """The nodes and devices this backend can run tasks on, as of now."""
        ...

    def allocate_ports(self, node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        """Ports free on ``node`` for a task to listen on, none of them in ``taken`` (the
        ports of this server's live tasks on the node, which the controller passes: a port
        stays its task's until the task has ended). Nothing is reserved in the kernel."""
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


@runtime_checkable
class TaskEndNotices(Protocol):
    """Optional capability: say when a launched task may have ended, so that the controller
    looks at once rather than at its next tick (push, not only poll; issue 33).

    ``on_task_end(callback)``: from then on the backend calls ``callback()`` — from a thread
    of its own, so it must be quick and must not call back into the backend — soon after a
    task it launched ends (or was stopped). A hint only: ``observe`` stays the truth, and
    the controller's tick still finds every end a backend does not announce.
    """

    def on_task_end(self, callback: Callable[[], None]) -> None: ...


SUSPEND_FILE_VARIABLE = "TRAINYARD_SUSPEND_FILE"


@dataclass(frozen=True)
class SuspendRequest:
    """Trainyard asks a task to save its state and stop (``docs/runtime.md``)."""

    reason: str
    deadline: datetime  # UTC: whatever of the task still runs then is stopped
    signal: str | None = None  # sent to the task's processes, e.g. "SIGUSR1"; None: the file only
    # An elastic job's resize (``runtime.resizing``): the number of workers it restarts at.
    # Such a request comes with the stop itself (SIGTERM, then the grace period).
    resize_to: int | None = None

    def as_json(self) -> dict[str, object]:
        """The request file's content, as ``trainyard.runtime.suspend_request`` reads it."""
        found: dict[str, object] = {"reason": self.reason, "deadline": self.deadline.timestamp(), "signal": self.signal}
        if self.resize_to is not None:
            found["resize_to"] = self.resize_to
        return found


@runtime_checkable
class Suspender(Protocol):
    """Optional capability: ask a running task to save its state and stop.

    The backend gives every task ``$TRAINYARD_SUSPEND_FILE``: a path the task can read,
    private to that task run, where no file exists at launch. ``suspend`` publishes the
    request there (atomically: a reader sees no file or a whole one), then sends
    ``request.signal`` to the task's processes, if it names one. It never stops the task:
    the controller does that at the deadline (``stop``). Safe on a task that has already
    ended, and more than once. A backend without it gets ``stop`` with the suspend grace
    period instead (SIGTERM, then SIGKILL).
    """

    def suspend(self, key: TaskKey, request: SuspendRequest) -> None: ...


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
class TaskFiles(Protocol):
    """Optional capability: where a job's files are, on a path this server reads, for its
    owner to list and download (``backends/filewalk``, ``services/job_files``)."""

    def job_dir(self, job_id: int) -> Path:
        """The job's directory ($TRAINYARD_JOB_DIR), whether or not it exists yet."""
        ...

    def work_dir(self, key: TaskKey) -> Path:
        """The task run's working directory, whether or not it exists (yet, or any more)."""
        ...


@runtime_checkable
class EnvironmentStore(Protocol):
    """Optional capability: a folder every node sees at the same path, where Trainyard
    builds custom environments (``yard env create``) as ``<root>/<owner>/<name>``.

    The build is a job of the owner's: the backend lets each task write in its owner's
    folder there, and lets every task read the rest (a task running in an environment
    needs its files). Which environments a user may *choose* is the services' rule.
    """

    environments_root: Path


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


class ExecError(RuntimeError):
    """A command cannot be run in the task now (it has ended, or the backend cannot reach
    it); the message says why."""


@dataclass(frozen=True)
class ExecPlan:
    """How to run a command in a running task's environment (``TaskExec``): ``argv``,
    started on the server's machine with exactly ``env`` in ``cwd`` (None: the server's
    own), reaches into the task (its container, sandbox, account, Slurm allocation). ``argv``
    ends with the command itself, never passed through a shell. ``shared`` says, in words,
    what of the task the command shares (for the docs and the event's reader)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    shared: str = ""
    # ``NAME=VALUE`` in the environment of the command's processes, when ending ``argv``'s
    # process group does not end them (a container engine's exec client leaves its command
    # running): when the user goes away, the server kills what still carries it on its
    # machine.
    marker: str | None = None


# What a shell in a task runs when its user names no command (``yard shell``): the task's
# $SHELL, else bash, else sh; interactive, not a login shell (a login shell's profile
# would reset PATH and lose the task's environment).
SHELL_COMMAND = (
    "/bin/sh", "-c",
    'if [ -n "$SHELL" ] && command -v "$SHELL" >/dev/null 2>&1; then exec "$SHELL" -i; fi; '
    'if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i',
)


@runtime_checkable
class TaskAccountCheck(Protocol):
    """A backend that runs each user's tasks as their own OS account and can say, at submit,
    that a user has none (so that the job is refused, not failed at launch)."""

    def check_task_account(self, user: str) -> None:
        """ValueError naming ``user`` and the fix when their tasks have no account to run as."""


@runtime_checkable
class GpuShareReport(Protocol):
    """A backend that says whether it enforces fractional GPU shares (``backends/gpushares``):
    ``gpu_share_note`` is "" where it does, else why not (a warning on a job with a share)."""

    gpu_share_note: str


def gpu_share_note(backend: object) -> str | None:
    """Why ``backend`` does not enforce GPU shares; "" where it does; None where it does not
    say (it runs no task: the simulated backend, tests' fakes)."""
    return backend.gpu_share_note if isinstance(backend, GpuShareReport) else None


@runtime_checkable
class TaskExec(Protocol):
    """Optional capability: run a command inside a running task (``yard exec``/``yard shell``).

    The backend only says how (``ExecPlan``); the server starts it, under a terminal when
    ``tty``, and carries its bytes to the user. Whether the user may is the server's rule.
    """

    def exec_plan(self, key: TaskKey, node: str, command: Sequence[str], *, tty: bool) -> ExecPlan:
        """How to run ``command`` in task ``key`` on ``node``; ExecError when it cannot be."""
        ...


@runtime_checkable
class PortOwners(Protocol):
    """Optional capability: whether a connection the server made to a task's port was taken
    by that task (``docs/security.md``, "A task's ports").

    The server connects to the task's port, sends nothing, and asks; only on None does the
    port proxy, the session way in, the port-forward tunnel or the session idle check send
    the user's request (and a session's JupyterLab token) on that connection. A backend that
    knows its node's processes has it (the local backend, from /proc); without it the
    server forwards to whatever listens on the port, as docs/security.md says.
    """

    def check_connection(self, key: TaskKey, node: str, port: int, ours: tuple[str, int]) -> str | None:
        """None when our connection from ``ours`` (our socket's own address and port) to
        ``port`` on ``node`` was taken by a listening socket of task ``key``'s own processes,
        running as its account; otherwise why not, in words for the user."""
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
    except FileNotFoundError:  # launched, but not started yet
        return LogChunk(data=b"", offset=0, size=0, exists=False)
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
