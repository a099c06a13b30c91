"""The local backend: runs tasks on this machine, each under its own detached supervisor.

State lives in ``state_dir/tasks/<job>/<attempt>/<role>-<index>-<run>/`` (file protocol in
``taskfiles``); nothing important lives in this object's memory, so a new backend on the
same state directory (after ``yard up`` restarts, or the server is killed with ``-9``)
sees and controls every task the old one launched. That includes stops: ``stop.json``
records each stop's SIGKILL deadline (wall-clock time), and ``observe`` enforces it when
the supervisor that should have done so is gone.

Who a task runs as (decided at start-up, see ``isolation``): the server's own account by
default; with ``accounts`` (per-user, the server is root) the job owner's own OS account
(``taskaccounts``); with ``run_as=USER`` one shared account. Under task accounts the
state directory is root's alone (it sits beside the server's token file and database,
and holds every task's spec, env and log), so work dirs move to their own tree:

    <state_dir>/                       0700 root   unreachable for task accounts
      tasks/<job>/<attempt>/<role>-<index>-<run>/
        spec.json pid.json stop.json status.json exit.json script.sh output.log supervisor.log
    <work_dir_root>/                   0711 root   default: <state_dir>-work, beside it
      <job>/<attempt>/                 0711 root   accounts may pass, not list or create
        <role>-<index>-<run>/          0700 ACCT   the task's working directory ($PWD)
        <role>-<index>-<run>.sh        0400 ACCT   the script bash runs (a copy)
        <role>-<index>-<run>.secrets/  0700 ACCT   one 0400 file per secret ($TRAINYARD_SECRETS_DIR)
        <role>-<index>-<run>.suspend/  0711 root   request.json, 0400 ACCT, once asked ($TRAINYARD_SUSPEND_FILE)
        .shm/                          0700 ACCT   the attempt's /dev/shm in the sandbox
      <job>/jobdir/                    0700 ACCT   the job's directory, kept across attempts ($TRAINYARD_JOB_DIR)
      pythonpath/trainyard/runtime.py  0755 root   first on every task's PYTHONPATH (``taskpython``)

The supervisor and the task's waiter stay root: the supervisor opens ``output.log`` and
hands the task the descriptor. Without task accounts the work dir is ``<task dir>/work``,
the secrets ``work.secrets`` and the suspend request's folder ``work.suspend`` beside it,
``.shm`` in the attempt's folder of the state dir, the job's directory is
``tasks/<job>/jobdir`` (``jobdirs``), and ``pythonpath`` is in the state dir (or in a
``work_dir_root``, when one is given). Every task of the job, in
every attempt, gets the same job directory, bound writable into its sandbox; it stays until
the controller removes it after the job has ended (``JobDirectories``).

Suspension (``Suspender``, ``docs/runtime.md``): ``suspend`` publishes the request in the
task's ``request.json`` (absent until then; the task can read it, not change or remove it),
then signals the task's process group directly, as a stop does when the supervisor is
gone: the supervisor never hears of it, for a suspension is no stop. The controller stops
whatever still runs at the deadline.

``spec.json`` holds the final ``argv`` the task process executes. With a ``sandbox`` that is
a bubblewrap command line (``sandbox``) that hides the server's home, the state dir and
the work root and drops to the account inside; the task process execs it with the spec's
``launch_env``, not the task's (it runs as root), and the task's start, its last step,
gives bash the task's ``env`` from ``spec.json``. Without one it is bash itself, and the
task process drops to the account (``user`` in the spec: groups, gid, uid) after joining
its process group and redirecting its output, before exec. The task's environment is
the clean one of ``backends/environment`` (nothing of the server's); its HOME, USER and
LOGNAME are the account's (HOME is the work dir for accounts without a home; the job's
env may still set them). Every directory above ``work_dir_root`` must be searchable by
the accounts; the constructor checks, and raises ValueError otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from trainyard.backends import cgroups, jobdirs, mps, taskuser
from trainyard.backends.base import (
    SUSPEND_FILE_VARIABLE,
    DatasetFetch,
    ExecPlan,
    GpuInfo,
    ImagePull,
    ImageRemoval,
    LogChunk,
    Mount,
    NodeDatasetCache,
    NodeImage,
    NodeInventory,
    SuspendRequest,
    TaskKey,
    TaskLaunch,
    TaskStatus,
    check_task_key,
    read_log_file,
)
from trainyard.backends.containers import (
    ContainerEngine,
    ContainerError,
    cdi_gpu_names,
    list_images,
    pull_image,
    remove_image,
)
from trainyard.backends.datacache import DEFAULT_FETCH_TIMEOUT_SECONDS
from trainyard.backends.environment import (
    base_environment,
    process_account,
    python_environment,
    site_environment,
)
from trainyard.backends.gpushares import find_enforcement, task_plan
from trainyard.backends.local import containerspec, portowners, procfs, taskexec, taskfiles
from trainyard.backends.local import gpus as local_gpus
from trainyard.backends.local.exitwatch import ExitWatch
from trainyard.backends.local.host import host_cpu_milli, host_memory_mb
from trainyard.backends.local.launcher import SupervisorLauncher
from trainyard.backends.local.metrics import LocalSampler
from trainyard.backends.local.outcomes import supervisor_log_note, with_container_records
from trainyard.backends.local.records import (
    Claim,
    exit_status,
    same_task,
    stop_deadline,
    stop_request,
    suspend_signal,
)
from trainyard.backends.local.taskenv import check_job_env, task_environment
from trainyard.backends.local.tasklimits import limits_layout
from trainyard.backends.mounts import NodeDatasets, account_reader, make_missing_storage, mount_env, unenforced_notes
from trainyard.backends.sandbox import LAUNCH_ENV, Identity, Sandbox, StorageMount, mount_fds, sandbox_argv
from trainyard.backends.sandboxjoin import open_inside
from trainyard.backends.taskaccounts import NO_HOME, TaskAccounts
from trainyard.backends.taskpython import install_runtime, with_runtime_path
from trainyard.backends.taskuser import TaskUser
from trainyard.core.metrics import Sampled
from trainyard.core.names import USER_NAME

log = logging.getLogger(__name__)

# How long a launched task may go without its supervisor claiming it (pid.json) before
# the backend decides it never started. Only matters after a server restart, or when the
# supervisor died during start-up.
STARTUP_TIMEOUT_SECONDS = 30.0
VANISHED = "supervisor vanished without recording an exit status"
# The task ended after its supervisor was lost; its waiter (its parent) recorded how.
SUPERVISOR_LOST = "its supervisor was lost; the task's waiter recorded its exit status"
# Beside a job attempt's task work dirs: what its sandboxed tasks see as /dev/shm. A role
# name cannot start with a dot, so no task's work dir can be called this.
SHM_DIR = ".shm"
NO_SANDBOX = "this node runs tasks without a sandbox (setting task_sandbox; bubblewrap)"
# Beside a task's work dir, the folder its suspend request appears in (``suspend``).
SUSPEND_DIR_SUFFIX = ".suspend"
SUSPEND_FILE = "request.json"
# The folder that goes first on every task's PYTHONPATH (``taskpython``): in the state dir,
# or in the work-dir root, where task accounts can read it. Not a job id, so never a job's.
TASK_PYTHON_DIR = "pythonpath"


class LocalBackend(jobdirs.JobDirTree):
    """Runs tasks as local processes; GPUs are handed out with ``CUDA_VISIBLE_DEVICES``."""

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        *,
        gpus: list[GpuInfo] | None = None,
        simulated_gpus: int = 0,
        cpu_milli: int | None = None,
        memory_mb: int | None = None,
        python: str | None = None,
        run_as: str | None = None,
        accounts: TaskAccounts | None = None,
        sandbox: Sandbox | None = None,
        work_dir_root: Path | None = None,
        labels: dict[str, str] | None = None,
        gpu_groups: list[list[int]] | None = None,
        site_env: dict[str, str] | None = None,
        task_limits: str = "auto",
        containers: ContainerEngine | None = None,
        environments_root: Path | None = None,
        pids_max: int | None = None,
        log_max_bytes: int | None = None,
        log_cap_stop: bool = False,
        dataset_cache: tuple[Path | None, int | None] = (None, None),
        dataset_sources: tuple[float, Sequence[str]] = (DEFAULT_FETCH_TIMEOUT_SECONDS, ()),
        gpu_shares: tuple[str, bool] = ("auto", False),  # gpu_share_enforcement, gpu_share_threads
        mps_control: str | None = None,  # None: nvidia-cuda-mps-control on PATH
    ) -> None:
        if run_as is not None and accounts is not None:
            raise ValueError("run_as (one account for every task) and per-user accounts exclude each other")
        self.state_dir = Path(state_dir).absolute()
        self._user = None if run_as is None else TaskUser.for_tasks(run_as)
        self._accounts = accounts
        self._site_env = site_environment(site_env or {})
        self._server_account = process_account()  # (home, user) of tasks run as the server's account
        self._tasks_root = self.state_dir / "tasks"
        self._tasks_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        taskuser.make_private(self.state_dir)  # every task's spec, env and log: the server's only
        self.work_dir_root = taskuser.set_up_work_root(
            self.state_dir, self._user, work_dir_root, per_user=accounts is not None
        )
        self.job_dirs_root = self._tasks_root if self.work_dir_root is None else self.work_dir_root
        # ``EnvironmentStore`` (the node's own disk is what every node of a one-node backend sees):
        # beside the work-dir root when tasks run under accounts, which can reach its parent
        # (the state dir's is the server's alone), else beside the state dir; each owner's
        # folder is made at their first task.
        beside = self.state_dir if self.work_dir_root is None else self.work_dir_root
        self.environments_root = (
            beside.with_name(f"{beside.name}-environments") if environments_root is None
            else Path(environments_root).absolute()
        )
        self.environments_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.environments_root, taskuser.ENVIRONMENTS_MODE)
        self.task_python = install_runtime((self.work_dir_root or self.state_dir) / TASK_PYTHON_DIR)
        # The node's dataset cache (``DatasetCaches``): in the state dir unless the admin says where.
        # ``dataset_sources``: a fetch's time in all, and the hosts allowed (``core.addresses``).
        self.datasets = NodeDatasets(Path(dataset_cache[0] or self.state_dir / "datasets"), dataset_cache[1],
                                     timeout=dataset_sources[0], allowed_hosts=dataset_sources[1])
        self.datasets.reader_of = lambda user: account_reader(accounts, self._user, user)
        # The sandbox hides the state dir and the work-dir root from every task, beside
        # what the caller hides (the server's home).
        hidden = (self.state_dir,) if self.work_dir_root is None else (self.state_dir, self.work_dir_root)
        self._sandbox = None if sandbox is None else sandbox.with_hidden(*hidden)
        if sandbox is not None and not sandbox.user_namespace and self._user is None and accounts is None:
            raise ValueError("a sandbox entered as root needs task accounts (run_as or per-user) to drop to")
        shell = shutil.which("bash")
        if shell is None:
            raise RuntimeError("bash was not found on PATH; the local backend runs task scripts with bash")
        self._shell = shell
        # Supervisors run from a private copy of their code (see ``launcher``), run once by
        # ``check_host`` before a server accepts jobs.
        self._launcher = SupervisorLauncher(self.state_dir, python)
        if gpus is None:
            gpus = local_gpus.discover_nvidia_gpus()
            if gpus and simulated_gpus:
                log.info("found %d NVIDIA GPU(s); ignoring simulated_gpus=%d", len(gpus), simulated_gpus)
            elif not gpus:
                gpus = local_gpus.simulated_gpus(simulated_gpus)
        self._node = NodeInventory(
            name=socket.gethostname(),
            address="127.0.0.1",
            cpu_milli=host_cpu_milli() if cpu_milli is None else cpu_milli,
            memory_mb=host_memory_mb() if memory_mb is None else memory_mb,
            gpus=tuple(local_gpus.with_groups(gpus, gpu_groups) if gpu_groups else gpus),
            labels=dict(labels or {}),
        )
        # GPU shares: one MPS daemon per user (``gpushares``), its pipes where accounts reach them.
        self.gpu_shares = find_enforcement(gpu_shares[0], self._node.gpus, str(beside.with_name(f"{beside.name}-mps")),
                                           threads=gpu_shares[1], control=mps_control)
        self.gpu_share_note = self.gpu_shares.note
        if self.gpu_shares.control is not None:
            # Made now and hidden from every sandbox (only a task's own pipe directory is bound
            # back): where users share one account (run_as), 0700 keeps none from another's daemon.
            try:
                mps.make_root(self.gpu_shares.root)
            except OSError as exc:
                log.warning("GPU shares: %s", exc)
            if self._sandbox is not None:
                self._sandbox = self._sandbox.with_hidden(Path(self.gpu_shares.root))
        self._limits, self.limits_note = limits_layout(task_limits, self.state_dir)
        # Sizes a task controls (issue 27): its processes and threads (pids.max, or the
        # container engine's --pids-limit), and what its output.log may grow to.
        self.pids_max = pids_max
        self.log_max_bytes = log_max_bytes
        self.log_cap_stop = log_cap_stop
        # Tasks with an image run in containers of this engine (None: none is installed).
        self.containers = containers
        self._pulls = self.state_dir / "images"  # when Trainyard pulled each image here
        self.cdi_gpus = cdi_gpu_names() if any(not g.simulated for g in self._node.gpus) else set()
        self._lock = threading.Lock()
        # Supervisors this object started, kept to reap them (no zombies) and to tell
        # "still starting" from "died before claiming the task". Dropped once settled.
        self._spawned: dict[TaskKey, subprocess.Popen[bytes]] = {}
        self._kill_timers: dict[TaskKey, threading.Timer] = {}
        self._task_groups: dict[TaskKey, tuple[int, int]] = {}  # known claims, for sampling
        self._exits = ExitWatch()  # the supervisors' exits, announced (``on_task_end``)
        self._sampler = LocalSampler(self._node.name, self._node.gpus, self.state_dir, self._task_group)

    def check_host(self) -> None:
        """Start a supervisor once (a subprocess): LaunchError saying why when this host
        cannot launch a task. ``yard up`` calls it before it accepts jobs; the constructor
        does not, so that a backend costs no process to make (tests make hundreds)."""
        self._launcher.check()

    # --- paths -------------------------------------------------------------------

    def task_dir(self, key: TaskKey) -> Path:
        """The directory holding everything about one task run."""
        check_task_key(key)
        return self._tasks_root.joinpath(*self._relative_parts(key))

    def work_dir(self, key: TaskKey) -> Path:
        """The task's working directory (see the module docstring for where it lives)."""
        if self.work_dir_root is None:
            return self.task_dir(key) / taskfiles.WORK_DIR
        self.task_dir(key)  # validates the key
        return self.work_dir_root.joinpath(*self._relative_parts(key))

    def task_work_paths(self, job_id: int) -> list[Path]:
        """Under task accounts each of the job's attempt folders in the work root (its tasks'
        working directories, scripts, secrets, suspend folders and ``.shm``: the module
        docstring); else each task's ``work``, ``work.secrets`` and ``work.suspend`` in its
        task directory, and the attempt's ``.shm``, beside the records that stay."""
        if self.work_dir_root is not None:
            return jobdirs.numbered(self.work_dir_root / str(job_id))
        found = []
        for attempt in jobdirs.numbered(self._tasks_root / str(job_id)):
            found.append(attempt / SHM_DIR)
            for task in sorted(attempt.iterdir()):
                if task.is_dir() and not task.is_symlink():
                    found += [task / taskfiles.WORK_DIR, task / f"{taskfiles.WORK_DIR}.secrets",
                              task / f"{taskfiles.WORK_DIR}{SUSPEND_DIR_SUFFIX}"]
        return found

    @staticmethod
    def _relative_parts(key: TaskKey) -> tuple[str, str, str]:
        return str(key.job_id), str(key.attempt), f"{key.role}-{key.index}-{key.run}"

    def log_path(self, key: TaskKey) -> Path:
        """The task's combined stdout+stderr log (it may not exist yet)."""
        return self.task_dir(key) / taskfiles.OUTPUT_LOG

    # --- MetricsSource -------------------------------------------------------------

    def sample(self, now: datetime, running: Mapping[TaskKey, tuple[int, ...]]) -> Sampled:
        """This machine, its GPUs and the process trees of the ``running`` tasks (``metrics``)."""
        self._task_groups = {k: v for k, v in self._task_groups.items() if k in running}
        return self._sampler.sample(now, running)

    def _task_group(self, key: TaskKey) -> tuple[int, int] | None:
        """The task's process group ``(pgid, leader start time)`` from its claim, if it has one;
        kept once known (a claim's process group never changes), while the task runs."""
        if (known := self._task_groups.get(key)) is not None:
            return known
        try:
            record = taskfiles.read_json(str(self.task_dir(key) / taskfiles.PID))
        except ValueError:
            return None
        claim = None if record is None else Claim.parse(record)
        if claim is None or claim.task is None or claim.boot_id != procfs.boot_id():
            return None
        self._task_groups[key] = claim.task
        return claim.task

    # --- ImageCache --------------------------------------------------------------

    def node_images(self) -> list[NodeImage]:
        if self.containers is None:
            return []
        return list_images(self.containers, self._node.name, self._pulls)

    def pull_image(self, image: str, node: str | None = None) -> list[ImagePull]:
        return [pull_image(self._engine_on(node), image, self._node.name, pulls=self._pulls)]

    def remove_image(self, image: str, node: str | None = None) -> list[ImageRemoval]:
        return [remove_image(self._engine_on(node), image, self._node.name, pulls=self._pulls)]

    def _engine_on(self, node: str | None) -> ContainerEngine:
        """The engine, for an image action on ``node`` (this one, or None: every node)."""
        if node is not None:
            self._check_node(node)
        if self.containers is None:
            raise ContainerError(f"node {self._node.name} has no container engine (install podman)")
        return self.containers

    # --- Backend -----------------------------------------------------------------

    def inventory(self) -> list[NodeInventory]:
        return [self._node]

    def allocate_ports(self, node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        self._check_node(node)
        if count < 0:
            raise ValueError(f"port count must be >= 0, got {count}")
        return portowners.free_ports(node, count, taken)

    def check_connection(self, key: TaskKey, node: str, port: int, ours: tuple[str, int]) -> str | None:
        """``PortOwners``: whether the task's own processes took our connection (``portowners``)."""
        self._check_node(node)
        what = f"task {key.role}/{key.index}"
        task_dir = self.task_dir(key)
        spec = taskfiles.read_json(str(task_dir / taskfiles.SPEC)) or {}
        record = taskfiles.read_json(str(task_dir / taskfiles.PID))
        claim = None if record is None else Claim.parse(record)
        if not spec or claim is None or claim.task is None or claim.boot_id != procfs.boot_id():
            return f"port {port}: {what} has no process to check it against yet, so it was not used"
        why = portowners.check(port, ours, portowners.TaskProcesses.of(spec, claim.task), what)
        if why is not None:
            log.warning("task %s: a connection to its port %s was not taken by the task: %s", key, port, why)
        return why

    def launch(self, task: TaskLaunch) -> None:
        self._check_node(task.node)
        known = {gpu.index for gpu in self._node.gpus}
        if unknown := sorted(set(task.gpus) - known):
            raise ValueError(f"task {task.key}: GPU indices {unknown} do not exist on {task.node}")
        task_dir = self.task_dir(task.key)
        check_job_env(task.env)  # before anything is written
        account = self._account_for(task)
        spec_path = str(task_dir / taskfiles.SPEC)
        with self._lock:
            self._reap()
            if (existing := taskfiles.read_json(spec_path)) is not None:
                self._check_same_task(task, task_dir, existing)
            if task.key in self._spawned or (task_dir / taskfiles.PID).exists():
                return
            # Spawning again after a server restart is safe even if the old server had
            # already spawned a supervisor: supervisors claim pid.json exclusively, so
            # at most one of them ever runs the task.
            task_dir.mkdir(parents=True, exist_ok=True)
            spec = self._task_spec(task, task_dir, account)
            if not taskfiles.write_json(spec_path, spec, exclusive=True):
                # Relaunched after a restart, or written by someone else since we looked.
                if (existing := taskfiles.read_json(spec_path)) is not None:
                    self._check_same_task(task, task_dir, existing)
                taskfiles.write_json(spec_path, spec)
            if self._sandbox is None and task.image is None and (notes := unenforced_notes(task.mounts, NO_SANDBOX)):
                with open(task_dir / taskfiles.OUTPUT_LOG, "a", encoding="utf-8") as output:
                    output.write("".join(note + "\n" for note in notes))
            self._spawned[task.key] = self._launcher.spawn(task_dir, task_dir / taskfiles.SUPERVISOR_LOG)
            self._exits.watch(self._spawned[task.key].pid)

    def on_task_end(self, callback: Callable[[], None]) -> None:
        """``callback()`` when a supervisor this object spawned exits: its task's end is
        recorded (``exitwatch``)."""
        self._exits.on_exit(callback)

    def observe(self, keys: Iterable[TaskKey]) -> dict[TaskKey, TaskStatus]:
        with self._lock:
            self._reap()
            spawned = dict(self._spawned)
        return {key: self._observe_key(key, spawned.get(key)) for key in keys}

    def stop(self, key: TaskKey, grace_seconds: float) -> None:
        try:
            task_dir = self.task_dir(key)
        except ValueError as exc:
            log.warning("ignoring a stop for an invalid task key %r: %s", key, exc)
            return
        if not task_dir.is_dir() or (task_dir / taskfiles.EXIT).exists():
            return
        stop_path = str(task_dir / taskfiles.STOP)
        stop = stop_request(taskfiles.read_json(stop_path), max(0.0, float(grace_seconds)), time.time())
        # Durable: a restarted server (observe) enforces the deadline if no supervisor does.
        taskfiles.write_json(stop_path, stop, durable=True)
        grace = max(0.0, stop["deadline"] - time.time())
        # The supervisor reads stop.json after it writes pid.json; we read pid.json after
        # writing stop.json. If there is no claim yet, the supervisor will see the stop.
        record = taskfiles.read_json(str(task_dir / taskfiles.PID))
        if record is None:
            return
        claim = Claim.parse(record)
        if claim.supervisor is not None:
            pid, started = claim.supervisor
            if procfs.signal_process(pid, started, signal.SIGTERM, claim.boot_id):
                return  # the supervisor applies the grace and records the exit
        if claim.task is not None:
            pgid, started = claim.task
            if procfs.signal_group(pgid, started, signal.SIGTERM, claim.boot_id):
                log.warning("task %s: its supervisor is gone; signalling its process group directly", key)
                self._kill_group_after(key, claim, grace)

    def suspend(self, key: TaskKey, request: SuspendRequest) -> None:
        """Publish ``request`` in the task's suspend file, then send its signal to the task's
        process group (``Suspender``; the module docstring). Nothing for a task that has
        ended; once more, the same, when asked again. A task not started yet finds the file
        when it starts."""
        try:
            task_dir = self.task_dir(key)
        except ValueError as exc:
            log.warning("ignoring a suspend request for an invalid task key %r: %s", key, exc)
            return
        if not task_dir.is_dir() or (task_dir / taskfiles.EXIT).exists():
            return
        signum = None if request.signal is None else suspend_signal(request.signal)
        spec = taskfiles.read_json(str(task_dir / taskfiles.SPEC)) or {}
        target = spec.get("suspend_file")
        if isinstance(target, dict):  # tasks launched before suspension existed have none
            owner = target.get("owner")
            taskuser.publish_file(Path(target["path"]), json.dumps(request.as_json()).encode(),
                                  None if owner is None else (int(owner[0]), int(owner[1])))
        record = taskfiles.read_json(str(task_dir / taskfiles.PID))
        claim = None if record is None else Claim.parse(record)
        if signum is None or claim is None or claim.task is None:
            return  # not started: the file is there when it starts
        # The group, checked by its leader's start time, like a stop without supervisor; the
        # supervisor and the waiter are outside it and never see this signal.
        procfs.signal_group(*claim.task, signum, claim.boot_id)

    def dataset_caches(self) -> list[NodeDatasetCache]:
        """``DatasetCaches``: this node's, read from its files."""
        return [self.datasets.report(self._node.name)]

    def prefetch(self, datasets: Sequence[DatasetFetch], node: str | None = None) -> None:
        for problem in self.datasets.prefetch(datasets):
            log.warning("prefetch: %s", problem)

    def exec_plan(self, key: TaskKey, node: str, command: Sequence[str], *, tty: bool) -> ExecPlan:
        """``TaskExec``: into the task's container, or its sandbox, account and cgroup (``taskexec``)."""
        self._check_node(node)
        return taskexec.exec_plan(self.task_dir(key), key, command, tty=tty, engine=self.containers,
                                  sandbox=self._sandbox)

    def read_log(self, key: TaskKey, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        try:
            path = self.log_path(key)
        except ValueError:  # a key no task can have: it has no log
            return LogChunk(data=b"", offset=0, size=0, exists=False)
        return read_log_file(path, offset, limit)

    # --- internals -----------------------------------------------------------------

    def _check_node(self, node: str) -> None:
        if node != self._node.name:
            raise ValueError(f"the local backend has one node, {self._node.name!r}; got {node!r}")

    def _reap(self) -> None:
        """Collect exited supervisors (so none stays a zombie); call with the lock held."""
        for key, popen in list(self._spawned.items()):
            if popen.poll() is not None and (self.task_dir(key) / taskfiles.PID).exists():
                del self._spawned[key]
        for key, timer in list(self._kill_timers.items()):
            if not timer.is_alive():
                del self._kill_timers[key]

    def _check_same_task(self, task: TaskLaunch, task_dir: Path, spec: dict[str, Any]) -> None:
        """Refuse to adopt a task dir that holds another task (e.g. another database's)."""
        if not same_task(spec, task.script, task.env):
            log.warning("task %s: %s holds a different task (other script or env); not adopting it", task.key, task_dir)
            raise RuntimeError(f"task dir {task_dir} already holds a different task; not adopting it as {task.key}")

    def _account_for(self, task: TaskLaunch) -> TaskUser | None:
        """The OS account the task runs as; None: the server's own."""
        if self._accounts is not None:
            return self._accounts.account_for(task.user)
        return self._user

    def _task_spec(self, task: TaskLaunch, task_dir: Path, account: TaskUser | None) -> dict[str, Any]:
        """Prepare the task's private files and say, in ``spec.json``, how to run it."""
        work = self._make_work_dir(task, account)
        home, user = self._server_account if account is None else (account.home, account.name)
        if account is not None and account.home in ("", NO_HOME):  # accounts Trainyard creates have no home
            home = str(work)
        below = python_environment({**base_environment(home, user), **self._site_env}, task.environment)
        env = task_environment(below, task.env, task.gpus)
        env = with_runtime_path(env, self.task_python)
        share = task_plan(self.gpu_shares, task, self._node.gpus, account, "-".join(self._relative_parts(task.key)))
        if share is not None:  # like the pinning, after the job's env: a job cannot widen its share
            env.update(mps.client_env(share))
        secrets_dir = work.with_name(work.name + ".secrets")
        if skipped := taskuser.write_secret_files(secrets_dir, task.secrets, account):
            log.warning("task %s: no file for secret(s) %s: not a safe file name", task.key, ", ".join(skipped))
        env["TRAINYARD_SECRETS_DIR"] = str(secrets_dir)
        # A container, like the sandbox, mounts each storage at its mountPath.
        inside = self._sandbox is not None or task.image is not None
        env.update(mount_env(task.mounts, inside=inside))
        env.update(self.datasets.env(task.datasets, inside=inside))
        for mount in task.mounts:
            make_missing_storage(mount, *((account.uid, account.gid) if account is not None else (None, None)))
            _check_sub_path(mount)
        # Owned by the job's account like its work dir, but one for all of the job's tasks
        # and attempts: whatever a task saves there is there when the job runs again.
        job_parts = (str(task.key.job_id), jobdirs.JOB_DIR_NAME)
        job_dir = taskuser.make_task_work_dir(self.job_dirs_root, job_parts, account)
        env[jobdirs.JOB_DIR_VARIABLE] = str(job_dir)
        # Where the owner's environments are built (``yard env create`` runs as their job).
        own_environments = taskuser.make_readable_owned_dir(self.environments_root / task.user, account) \
            if USER_NAME.fullmatch(task.user) else None
        # Ours, passable by the task's account; the request in it will be the account's, 0400.
        suspend_dir = taskuser.make_passable_dir(work.with_name(work.name + SUSPEND_DIR_SUFFIX), account)
        env[SUSPEND_FILE_VARIABLE] = str(suspend_dir / SUSPEND_FILE)
        env.update(taskuser.publish_workdir(suspend_dir, task.workdir_archive,
                                            None if account is None else (account.uid, account.gid)))
        spec: dict[str, Any] = {
            "key": str(task.key),
            "script": task.script,
            "env": env,
            "job_env": dict(task.env),
            "cwd": str(work),
            "shell": self._shell,
            "grace_seconds": task.grace_seconds,
            "gpus": list(task.gpus),
            # Who the task's processes run as, for ``check_connection``.
            "owner_uid": os.geteuid() if account is None else account.uid,
            "suspend_file": {
                "path": env[SUSPEND_FILE_VARIABLE],
                "owner": None if account is None else [account.uid, account.gid],
            },
        }
        spec.update({"mps": share} if share else {})  # the waiter holds the owner's MPS daemon meanwhile
        spec.update(self._limits_spec(task))
        if task.datasets:  # fetched (or found) in the node's cache before the task starts
            spec["datasets"] = self.datasets.plan(task.datasets)
        if self.log_max_bytes is not None:  # the supervisor's log writer holds output.log to it
            spec["log_max_bytes"] = self.log_max_bytes
            spec["log_cap_stop"] = self.log_cap_stop
        script_file = task_dir / taskfiles.SCRIPT  # written by the supervisor
        if account is not None:
            script_file = work.with_suffix(".sh")
            taskuser.write_user_script(script_file, task.script, account)
            spec["script_file"] = str(script_file)
        if task.image is not None:  # the container replaces the sandbox and the drop to the account
            spec["container"] = containerspec.container_spec(self, task, task_dir, work, env, script_file,
                                                             secrets_dir, job_dir, account)
            spec["argv"] = spec["container"]["run"]
            return spec
        command = [self._shell, "--noprofile", "--norc", str(script_file)]
        if self._sandbox is None:
            if account is not None:
                spec["user"] = account.spec()  # the supervisor's child drops to it
            spec["argv"] = command
            return spec
        identity = None
        if account is not None:
            if self._sandbox.user_namespace:
                raise ValueError("task accounts need the server to run as root")
            identity = Identity(account.uid, account.gid, tuple(account.groups()))
            # Who ``yard exec`` becomes in the sandbox (``taskexec``), as the task's start makes the task.
            spec["sandbox_identity"] = {"uid": identity.uid, "gid": identity.gid, "groups": list(identity.groups)}
        attempt_dir = task_dir.parent if self.work_dir_root is None else work.parent
        shm = taskuser.make_owned_dir(attempt_dir / SHM_DIR, account)
        mounts = [StorageMount(Path(m.root or m.source), m.sub_path, Path(m.target), m.read_only)
                  for m in (*task.mounts, *self.datasets.mounts(task.datasets))]
        spec["argv"] = sandbox_argv(
            self._sandbox, command, hidden=(), work_dir=work, shm_dir=shm, stop_file=task_dir / taskfiles.STOP,
            spec_file=task_dir / taskfiles.SPEC,
            bound=(secrets_dir, script_file, suspend_dir, self.task_python, self.environments_root),
            writable=(job_dir, *([] if own_environments is None else [own_environments]),
                      *([] if share is None else [Path(mps.pipe_dir(share))])),
            identity=identity,
            mounts=mounts, storage_paths=[*map(Path, task.storage_paths), self.datasets.root],
            starter=self._launcher.starter(),
        )
        # The supervisor opens each storage's folder and hands it to bwrap (``open_mount_fds``).
        spec["mount_fds"] = mount_fds(mounts)
        # What env, bwrap and the task's start run with (as root): never the job's variables.
        spec["launch_env"] = dict(LAUNCH_ENV)
        return spec

    def _limits_spec(self, task: TaskLaunch) -> dict[str, Any]:
        """The ``cgroup`` plan of the task's limits (the supervisor creates it), or the
        ``limits_note`` saying why its limits are not enforced."""
        # In a container the engine holds the container to them (--memory, --cpus, --pids-limit).
        if task.image is not None or (task.cpu_milli <= 0 and task.memory_mb <= 0 and not self.pids_max):
            return {}
        if self._limits is None:
            return {"limits_note": self.limits_note} if self.limits_note else {}
        name = "-".join(self._relative_parts(task.key))
        plan = cgroups.task_plan(self._limits, name, task.cpu_milli, task.memory_mb, self.pids_max)
        spec: dict[str, Any] = {} if plan is None else {"cgroup": plan}
        if self._limits.note and task.cpu_milli > 0:
            spec["limits_note"] = self._limits.note
        return spec
    def _make_work_dir(self, task: TaskLaunch, account: TaskUser | None) -> Path:
        if self.work_dir_root is None:
            work = self.work_dir(task.key)
            work.mkdir(parents=True, exist_ok=True)
            return work
        return taskuser.make_task_work_dir(self.work_dir_root, self._relative_parts(task.key), account)

    def _observe_key(self, key: TaskKey, popen: subprocess.Popen[bytes] | None) -> TaskStatus:
        try:
            task_dir = self.task_dir(key)
        except ValueError as exc:
            return TaskStatus(key, running=False, lost=True, message=f"invalid task key: {exc}")
        return with_container_records(self._observe(key, task_dir, popen), task_dir)

    def _observe(self, key: TaskKey, task_dir: Path, popen: subprocess.Popen[bytes] | None) -> TaskStatus:
        if not task_dir.is_dir():
            return TaskStatus(key, running=False, lost=True, message="no trace of this task in the state directory")
        if (ended := self._exit_status(key, task_dir)) is not None:
            return ended
        record = taskfiles.read_json(str(task_dir / taskfiles.PID))
        if record is None:
            return self._observe_unclaimed(key, task_dir, popen)
        claim = Claim.parse(record)
        if claim.supervisor is None:
            return TaskStatus(key, running=False, message=claim.note or VANISHED)
        if procfs.is_alive(*claim.supervisor, claim.boot_id):
            self._enforce_stop(key, task_dir, claim, supervised=True)
            return TaskStatus(key, running=True)
        if claim.task is not None and procfs.group_alive(*claim.task, claim.boot_id):
            if not self._enforce_stop(key, task_dir, claim, supervised=False):
                return TaskStatus(key, running=True, message=self._unsupervised_note(claim))
            if procfs.group_alive(*claim.task, claim.boot_id):
                return TaskStatus(key, running=True, message="killed after its stop deadline; waiting for it to end")
        if claim.waiter is not None and procfs.is_alive(*claim.waiter, claim.boot_id):
            # The task has ended; its waiter is killing leftovers or writing status.json.
            return TaskStatus(key, running=True, message="its supervisor is gone; its exit status is being recorded")
        # The supervisor writes exit.json just before it exits: look again.
        if (ended := self._exit_status(key, task_dir)) is not None:
            return ended
        if (status := taskfiles.read_json(str(task_dir / taskfiles.STATUS))) is not None:
            notes = [SUPERVISOR_LOST, status.get("message") or ""]
            return exit_status(key, {**status, "message": "; ".join(n for n in notes if n)})
        # Supervisor and waiter both gone with no record: nobody can know how the task ended.
        # Nobody removed its cgroup either (once the task's group is gone, nothing of it
        # should be left in there).
        if (spec := taskfiles.read_json(str(task_dir / taskfiles.SPEC))) and spec.get("cgroup"):
            cgroups.kill_all(spec["cgroup"])
            cgroups.remove(spec["cgroup"])
        return TaskStatus(key, running=False, message=VANISHED)

    @staticmethod
    def _unsupervised_note(claim: Claim) -> str:
        if claim.waiter is not None and procfs.is_alive(*claim.waiter, claim.boot_id):
            return "its supervisor is gone; the task still runs, and its waiter will record its exit status"
        return "its supervisor and waiter are gone but the task still runs; its exit status will not be recorded"

    def _observe_unclaimed(self, key: TaskKey, task_dir: Path, popen: subprocess.Popen[bytes] | None) -> TaskStatus:
        """No pid.json yet: the supervisor is starting, or it never will."""
        if popen is not None:
            returncode = popen.poll()
            if returncode is None:
                return TaskStatus(key, running=True, message="supervisor starting")
            reason = f"the task's supervisor exited with status {returncode} before starting the task"
        else:
            spec = task_dir / taskfiles.SPEC
            launched = (spec if spec.exists() else task_dir).stat().st_mtime
            if time.time() - launched < STARTUP_TIMEOUT_SECONDS:
                return TaskStatus(key, running=True, message="supervisor starting")
            reason = f"no supervisor started the task within {STARTUP_TIMEOUT_SECONDS:.0f} s of its launch"
        reason += supervisor_log_note(task_dir)
        # Claim the task ourselves so that a supervisor arriving late can never run it.
        tombstone = {"boot_id": procfs.boot_id(), "supervisor": None, "task": None, "abandoned": reason}
        if not taskfiles.write_json(str(task_dir / taskfiles.PID), tombstone, exclusive=True):
            return self._observe(key, task_dir, None)  # a supervisor claimed it just now
        # Loudly, once (only one observer writes the tombstone): a server whose launches
        # fail must not look healthy; and in the task's log, which `yard logs` shows.
        log.error("task %s could not start: %s (see %s)", key, reason, task_dir / taskfiles.SUPERVISOR_LOG)
        with open(task_dir / taskfiles.OUTPUT_LOG, "ab") as output:
            output.write(f"trainyard: the task could not start: {reason}\n".encode())
        return TaskStatus(key, running=False, message=reason)

    @staticmethod
    def _exit_status(key: TaskKey, task_dir: Path) -> TaskStatus | None:
        record = taskfiles.read_json(str(task_dir / taskfiles.EXIT))
        return None if record is None else exit_status(key, record)

    def _enforce_stop(self, key: TaskKey, task_dir: Path, claim: Claim, *, supervised: bool) -> bool:
        """Act on a stop whose deadline has passed while the task still runs; True if acted.

        The kill timers of ``stop`` live in memory and die with the server. A live
        supervisor gets the stop again: one that never got it (the server died between
        writing stop.json and signalling) now applies it, and one that did forwards the
        repeat, on which the waiter SIGKILLs the group at once (a safety net). Without a
        supervisor, the task's group is SIGKILLed here.
        """
        deadline = stop_deadline(taskfiles.read_json(str(task_dir / taskfiles.STOP)))
        if deadline is None or time.time() < deadline:
            return False
        if supervised:
            assert claim.supervisor is not None
            return procfs.signal_process(*claim.supervisor, signal.SIGTERM, claim.boot_id)
        assert claim.task is not None
        if procfs.signal_group(*claim.task, signal.SIGKILL, claim.boot_id):
            log.warning("task %s: its stop deadline passed with no supervisor; killed its process group", key)
            return True
        return False

    def _kill_group_after(self, key: TaskKey, claim: Claim, grace: float) -> None:
        """SIGKILL the task's group after ``grace`` unless it has ended (supervisor-less stop)."""
        assert claim.task is not None
        pgid, started = claim.task
        if grace <= 0:
            procfs.signal_group(pgid, started, signal.SIGKILL, claim.boot_id)
            return
        with self._lock:
            if key in self._kill_timers and self._kill_timers[key].is_alive():
                return
            timer = threading.Timer(grace, procfs.signal_group, (pgid, started, signal.SIGKILL, claim.boot_id))
            timer.daemon = True
            self._kill_timers[key] = timer
            timer.start()


def _check_sub_path(mount: Mount) -> None:
    """A subPath is a folder inside its storage, reached without a link: said at launch (the
    sandbox's supervisor opens it so again, with no gap for a swap; a container engine
    opens it by its path)."""
    if mount.sub_path:
        os.close(open_inside(mount.root, mount.sub_path, f"storage {mount.name!r}"))
