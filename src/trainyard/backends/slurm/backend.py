"""The Slurm backend: Trainyard places jobs, Slurm runs them exactly there and tracks them.

Each job attempt's gang is one Slurm job, submitted pinned to the placement
(``submission``); its tasks run as steps under fixed runner scripts (``runners``) that
record each task's exit status and log into the task's directory. Everything lives under
``state_dir``, which compute nodes must see at the same path (a shared file system; on a
one-machine cluster any directory):

    <state_dir>/bin/gang-runner.sh, task-runner.sh, task-sampler.py, nvml_devices.py,
                    container-cgroup.py, dataset-step.py, datasets/      fixed text, no job data
    <state_dir>/datasets/nodes/<node>.json, cache/<node>/   a node's dataset cache's report, and the cache
                    (the cache there only as a non-root server without dataset_cache_dir: ``datasets.cache_base``)
    <state_dir>/pythonpath/trainyard/runtime.py   first on every task's PYTHONPATH (``taskpython``)
    <state_dir>/jobs/<job>/<attempt>/
        <role>-<index>-<run>/    env script.sh ports work/ output.log exit fault metrics.json suspend.json  a task run
        slurm-gang/              job_id submitting tasks stop.json suspend.json batch.log   the gang's submission
        slurm-<role>-<index>-<run>/   (the same, for an in-place re-run, run > 0, and for each run
                                      of an elastic job's worker, with ``elastic``: ``launch_gang``)
    <state_dir>/jobs/<job>/jobdir/     $TRAINYARD_JOB_DIR: the job's tasks share it, its
                                       attempts keep it (``jobdirs``), until the controller
                                       removes it after the job has ended

Nothing important lives in memory, so a new backend on the same directory (after ``yard
up`` restarts) re-adopts every Slurm job by the id in ``job_id``, or, if the server died
between ``sbatch`` and writing that file, by the job's unique name. States and exit
codes come from the task's ``exit`` file (written inside the Slurm step) and otherwise
from Slurm (``scontrol show job``): a job cancelled or failed outside Trainyard, or one
Slurm could never start, ends its tasks with Slurm's own words as the reason.

Suspension (``Suspender``, ``docs/runtime.md``): the server writes each task's request in
its ``suspend.json`` ($TRAINYARD_SUSPEND_FILE, on the shared directory, so the task reads
it where it runs), then has each task runner of the Slurm job send the signal to its
task's process group (``_relay``; a stop's SIGTERM goes the same way). One SIGURG reaches
the whole Slurm job, so the first task's ``suspend`` publishes the request to every task
of its submission (``tasks`` names them) before the one signal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import logging
import os
import random
import re
import signal
import threading
import time
import zlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from trainyard.backends import jobdirs, taskuser
from trainyard.backends.base import (
    WORKDIR_ARCHIVE_NAME,
    DatasetFetch,
    ExecPlan,
    ImagePull,
    ImageRemoval,
    LogChunk,
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
from trainyard.backends.cgroups import OUT_OF_MEMORY
from trainyard.backends.containers import ContainerEngine, with_image_pull
from trainyard.backends.environment import base_environment, process_account, site_environment
from trainyard.backends.mounts import account_reader
from trainyard.backends.sandbox import Sandbox
from trainyard.backends.slurm import datasets, mpsstep, runners, sandboxing, shares, submission, taskexec
from trainyard.backends.slurm.commands import SlurmCommands, SlurmError
from trainyard.backends.slurm.images import NodeImages
from trainyard.backends.slurm.jobstate import SlurmJob, slurm_jobs
from trainyard.backends.slurm.nodes import (
    NodeGres,
    figure,
    in_partition,
    is_schedulable,
    node_gres,
    node_inventory,
    node_sample,
    whole,
    with_measured_gpus,
)
from trainyard.backends.slurm.taskrecords import (
    EXIT,
    FAULT,
    exit_status,
    fresh,
    pull_record,
    read_json,
    read_text,
)
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.backends.taskpython import install_runtime
from trainyard.backends.taskuser import TaskUser
from trainyard.core import wiring
from trainyard.core.metrics import Sampled, TaskSample
from trainyard.core.settings import DEFAULT_MONITOR_INTERVAL_SECONDS

log = logging.getLogger(__name__)

# A task directory's name (``<role>-<index>-<run>``), as a submission's ``tasks`` file lists them.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Characters a state directory may not hold: Slurm expands ``%`` and ``\`` in output
# paths, and the runner scripts' argv must stay one path per argument.
_UNSAFE_PATH = re.compile(r"[%\\\n\r\t ]")
# Ports are chosen below Linux's default ephemeral range (32768+) on nodes the server cannot
# probe; the task runner checks them free where the task starts (``runners.TASK_RUNNER``).
PORT_RANGE = range(20000, 32000)
# How stale Slurm's job table may be when observing (see SlurmBackend._slurm_jobs).
SLURM_POLL_SECONDS = 1.0
# How long a pending job may keep a "cannot start" reason while its nodes look usable.
STUCK_SECONDS = 60.0
# Locks that submissions are striped over (``_submit``).
SUBMIT_LOCKS = 64
# Slurm's verdicts that blame the machine, not the job: its tasks' statuses are unknown
# (LOST, retried without spending the job's jobRetryCount), whatever signal they got.
PLATFORM_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
CANCELLED = "CANCELLED"
# Slurm's verdict on its job (NODE_FAIL, CANCELLED, ...) is awaited, for a clear reason.
VERDICT_WAIT_SECONDS = 10.0
# How often a stop whose grace period has run out is re-sent as a full cancel.
CANCEL_RETRY_SECONDS = 2.0
# In a task's directory: its stop's grace period is over (or it had none), written just before
# the cancel; the task runner kills the task's process group at Slurm's SIGTERM (``runners``).
GRACE_OVER = "grace.over"
JOB_ID = "job_id"
SUBMITTING = "submitting"
STOP = "stop.json"
SUSPEND = "suspend.json"  # in a submission's directory: its Slurm job was signalled to suspend
TASKS = "tasks"  # in a submission's directory: the names of its tasks' directories, one a line
# In a submission's directory: it runs one worker of an elastic job, whose end counts only
# once Slurm has ended its job (its GPUs and quota are free then, not when the task exits).
ELASTIC = "elastic"
METRICS = "metrics.json"  # the task sampler's newest figures, in the task's directory
# The nodes' interpreter that starts a sandboxed task (task-start.py, sandboxjoin.py; stdlib only).
NODE_PYTHON = "/usr/bin/python3"


def job_name_prefix(state_dir: Path) -> str:
    """The start of the names of the Slurm jobs of the backend whose state directory this is:
    one prefix per state directory (i.e. per store), so that job names are ours alone."""
    return "trainyard-" + hashlib.sha256(str(Path(state_dir).absolute()).encode()).hexdigest()[:8]


class SlurmBackend(jobdirs.JobDirTree):
    """Runs each job attempt as one Slurm job pinned to Trainyard's placement."""

    name = "slurm"
    def __init__(
        self,
        state_dir: Path,
        *,
        partition: str | None = None,
        commands: SlurmCommands | None = None,
        site_env: dict[str, str] | None = None,
        sample_interval_seconds: float = DEFAULT_MONITOR_INTERVAL_SECONDS,
        containers: ContainerEngine | None = None,
        pyxis: bool = False,
        environments_root: Path | None = None,
        accounts: TaskAccounts | None = None,
        sandbox: Sandbox | None = None,
        node_python: str = NODE_PYTHON,
        dataset_cache: tuple[Path | None, int | None] = (None, None),
        dataset_sources: tuple[float, Sequence[str]] | None = None,
        gpu_shares: tuple[str, bool] = ("auto", False),  # gpu_share_enforcement, gpu_share_threads
        mps_control: str | None = None,  # the nodes' (None: nvidia-cuda-mps-control on their PATH)
        mps_root: Path | None = None,  # the nodes' folder of MPS daemons (None: shares.DEFAULT_ROOT/<hash>)
    ) -> None:
        self.state_dir = Path(state_dir).absolute()
        # Per-user accounts (root): each task runs as its owner's account, in a bubblewrap
        # sandbox entered as root on its node, which drops to the account (``sandboxing``).
        if (accounts is None) != (sandbox is None) or (sandbox is not None and sandbox.user_namespace):
            raise ValueError("on Slurm, per-user task accounts and the sandbox go together, entered as root")
        if pyxis and accounts is not None:
            # Pyxis runs the step in its image as the job's Slurm user, root here: the task
            # would run as root, with the whole state directory mounted.
            raise ValueError("slurm_pyxis cannot run tasks as their owners' accounts (Pyxis runs the step as the "
                             "account that submits it, root); use container_engine (podman on the nodes) instead, "
                             "or task_accounts=server")
        self.accounts = accounts
        self.commands = commands or SlurmCommands()
        # Hidden from tasks: the state dir, and munged's socket, through which a task could
        # have Slurm run jobs as its account, outside the sandbox and Trainyard's scheduling.
        self._sandbox = None if sandbox is None else sandbox.with_hidden(self.state_dir,
                                                                         *sandboxing.munge_dir(self.commands))
        if _UNSAFE_PATH.search(str(self.state_dir)):
            raise ValueError(f"the Slurm state directory {self.state_dir} may not contain %, \\, spaces or newlines")
        self.partition = partition
        self.containers = containers  # what runs the tasks of jobs with an image, inside their steps
        self.pyxis = pyxis  # or: Slurm runs those steps in their image itself (srun --container-image)
        # Jobs run as the account running `yard up`; their environment starts clean from its
        # HOME and USER and the site's variables (backends/environment).
        self._site_env = site_environment(site_env or {})
        self._base_env = {**base_environment(*process_account()), **self._site_env}
        self.job_dirs_root = self.state_dir / "jobs"
        self.job_dirs_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        # ``EnvironmentStore``: in the state dir, which every compute node sees at the same path.
        self.environments_root = self.state_dir / "environments" if environments_root is None \
            else Path(environments_root).absolute()
        self.environments_root.mkdir(parents=True, exist_ok=True)
        bin_dir = self.state_dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        self.gang_runner = _install(bin_dir / "gang-runner.sh", runners.GANG_RUNNER)
        self.task_runner = _install(bin_dir / "task-runner.sh", runners.TASK_RUNNER)
        self.exec_runner = _install(bin_dir / "exec-runner.sh", taskexec.EXEC_RUNNER)
        self.sample_interval = sample_interval_seconds
        sampler = runners.TASK_SAMPLER.replace("@INTERVAL@", repr(float(sample_interval_seconds)))
        _install(bin_dir / "task-sampler.py", sampler)
        # The sampler's NVML reading is the local backend's: the same module, copied beside it.
        _install(bin_dir / runners.NVML_MODULE,
                 importlib.resources.files("trainyard.backends").joinpath("nvml_devices.py").read_text())
        # And a container's memory cgroup is the local backend's too (``containercgroup``).
        _install(bin_dir / runners.CGROUP_HELPER,
                 importlib.resources.files("trainyard.backends").joinpath("containercgroup.py").read_text())
        # A sandboxed task's start on its node: stdlib scripts, run isolated by the node's python3.
        _install(bin_dir / "sandboxjoin.py",
                 importlib.resources.files("trainyard.backends").joinpath("sandboxjoin.py").read_text())
        self.task_start = _install(bin_dir / "task-start.py",
                                   importlib.resources.files("trainyard.backends.slurm").joinpath("taskstart.py")
                                   .read_text())
        self._starter = (node_python, "-I", "-S", str(bin_dir / "sandboxjoin.py"))
        self.task_python = install_runtime(self.state_dir / "pythonpath")
        self.name_prefix = job_name_prefix(self.state_dir)
        # GPU shares (issue 36): shards place fractions of a GPU (``submission``); MPS holds a
        # task to its share on its node (``shares``: each node's mps-step.py, run by the task
        # runner as root) where tasks run as their owners' accounts; else the note says why not.
        self.gpu_share_note = shares.share_note(gpu_shares[0], accounts is not None)
        self.gpu_share_threads, self.mps_control = gpu_shares[1], mps_control
        self.mps_root = str(mps_root or Path(shares.DEFAULT_ROOT) / self.name_prefix.removeprefix("trainyard-"))
        if not self.gpu_share_note:
            _install(bin_dir / shares.NODE_STEP, importlib.resources.files("trainyard.backends.slurm")
                     .joinpath("mpsstep.py").read_text())
            _install(bin_dir / shares.NODE_COPY, importlib.resources.files("trainyard.backends").joinpath("mps.py")
                     .read_text())
            # Hidden from every sandbox but for the task's own pipe directory (as on the local
            # backend): made here too, so that the sandbox's command line, built here, hides it.
            os.makedirs(self.mps_root, mode=0o711, exist_ok=True)
            assert self._sandbox is not None
            self._sandbox = self._sandbox.with_hidden(Path(self.mps_root))
        usable = lambda: [n.name for n in self.inventory() if n.schedulable]  # noqa: E731
        self._images = NodeImages(self.commands, self.state_dir, partition, self.name_prefix,
                                  containers=lambda: self.containers, usable_nodes=usable)
        self.datasets = datasets.SlurmDatasets(
            self.state_dir, self.commands, partition=partition, name_prefix=self.name_prefix, usable_nodes=usable,
            cache=dataset_cache, sources=dataset_sources, reader_of=lambda user: account_reader(accounts, None, user),
            node_python=node_python, install=_install)  # the step the nodes run, installed in bin/
        # One lock per submission (striped): the controller submits gangs side by side, and
        # one gang is never submitted twice at once (the marker and the lookup below).
        self._locks = tuple(threading.Lock() for _ in range(SUBMIT_LOCKS))
        self._last_cancel: dict[str, float] = {}
        self._stuck_since: dict[str, float] = {}  # Slurm job id -> when first seen unable to start
        # Slurm job id -> when this object submitted it (monotonic); see _slurm_jobs.
        self._submitted: dict[str, float] = {}
        self._jobs_cache: tuple[float, dict[str, SlurmJob]] | None = None
        # Node -> how its GPUs are asked for (types by index, pinned, shards), from the last inventory.
        self._node_gres: dict[str, NodeGres] = {}

    # --- paths -------------------------------------------------------------------

    def task_dir(self, key: TaskKey) -> Path:
        check_task_key(key)
        return self._attempt_dir(key) / f"{key.role}-{key.index}-{key.run}"

    def work_dir(self, key: TaskKey) -> Path:
        """The task's working directory on the shared directory: its account's folder beside
        the task's (``<role>-<index>-<run>.work``) when it ran as one, else ``work`` in it."""
        task_dir = self.task_dir(key)
        beside = task_dir.with_name(task_dir.name + submission.WORK_SUFFIX)
        return beside if os.path.lexists(beside) else task_dir / "work"

    def task_work_paths(self, job_id: int) -> list[Path]:
        """Each task's working directory (its account's ``.work`` beside the task's folder, or
        ``work`` in it), script, secrets and suspend folder (the archive of its working
        directory is there), beside the task's records, which stay."""
        found = []
        for attempt in jobdirs.numbered(self.job_dirs_root / str(job_id)):
            found.append(attempt / ".shm")  # the attempt's /dev/shm in the sandbox
            for entry in sorted(attempt.iterdir()):
                if entry.name.endswith((submission.WORK_SUFFIX, submission.SECRETS_SUFFIX, submission.SCRIPT_SUFFIX,
                                        submission.SUSPEND_SUFFIX)):
                    found.append(entry)
                elif entry.is_dir() and not entry.is_symlink():  # without accounts, all in the task's folder
                    found += [entry / "work", entry / "secrets", entry / WORKDIR_ARCHIVE_NAME]
        return found

    def submission_dir(self, key: TaskKey) -> Path:
        """Where the Slurm job running this task run is recorded: the gang's for a first run,
        a Slurm job of its own for an in-place re-run or an elastic worker (``launch_gang``)."""
        own = self._own_submission_dir(key)
        return own if key.run > 0 or own.is_dir() else own.with_name("slurm-gang")

    def _own_submission_dir(self, key: TaskKey) -> Path:
        self.task_dir(key)  # validates the key
        return self._attempt_dir(key) / f"slurm-{key.role}-{key.index}-{key.run}"

    def slurm_job_name(self, key: TaskKey) -> str:
        return f"{self.name_prefix}-{key.job_id}-{key.attempt}-{self.submission_dir(key).name}"

    def slurm_job_id(self, key: TaskKey) -> str | None:
        """The Slurm job running this task, if it was submitted."""
        return read_text(self.submission_dir(key) / JOB_ID)

    def _attempt_dir(self, key: TaskKey) -> Path:
        return self.state_dir / "jobs" / str(key.job_id) / str(key.attempt)

    # --- MetricsSource -------------------------------------------------------------

    def sample(self, now: datetime, running: Mapping[TaskKey, tuple[int, ...]]) -> Sampled:
        """Node figures from Slurm (``nodes.node_sample``); each task's from the ``metrics.json``
        its sampler writes inside its step, when fresh (written within three sampling periods).
        The GPUs a fresh record measured (through NVML, on the node) stand in for Slurm's
        unmeasured ones in that node's sample: its other GPUs stay "n/a"."""
        errors: list[str] = []
        try:
            records = [r for r in self.commands.nodes() if in_partition(r, self.partition)]
        except SlurmError as exc:
            records = []
            errors.append(f"Slurm did not list its nodes: {exc}")
        tasks = []
        measured: dict[str, dict[int, Mapping[str, Any]]] = {}  # node -> Slurm's GPU id -> figures
        fresh_after = now.timestamp() - max(3 * self.sample_interval, 30.0)
        for key, gpus in running.items():
            try:
                record = read_json(self.task_dir(key) / METRICS)
            except (ValueError, OSError):
                continue
            if record is None or not fresh(record, fresh_after):
                continue
            node = str(record.get("node", ""))
            for device in record.get("gpus") or ():
                if isinstance(device, dict) and isinstance(device.get("index"), int):
                    measured.setdefault(node, {})[device["index"]] = device
            tasks.append(TaskSample(
                job_id=key.job_id, attempt=key.attempt, role=key.role, index=key.index,
                node=node, at=now, cpu_cores=figure(record, "cpu_cores"),
                memory_mb=whole(record, "memory_mb"), gpus_held=float(len(gpus)),
                gpu_util_pct=figure(record, "gpu_util_pct"), gpu_memory_mb=whole(record, "gpu_memory_mb"),
                disk_read_bytes_per_s=figure(record, "disk_read_bytes_per_s"),
                disk_write_bytes_per_s=figure(record, "disk_write_bytes_per_s"),
            ))
        nodes = tuple(with_measured_gpus(node_sample(r, now), measured.get(r["NodeName"], {})) for r in records)
        return Sampled(nodes=nodes, tasks=tuple(tasks), errors=tuple(errors))

    # --- ImageCache (``images.NodeImages``: a short step per node) -------------------

    def node_images(self) -> list[NodeImage]:
        return self._images.node_images()

    def pull_image(self, image: str, node: str | None = None) -> list[ImagePull]:
        return self._images.pull_image(image, node)

    def remove_image(self, image: str, node: str | None = None) -> list[ImageRemoval]:
        return self._images.remove_image(image, node)

    # --- DatasetCaches (``datasets.SlurmDatasets``: each node's, fetched by its own steps) ---
    def dataset_caches(self) -> list[NodeDatasetCache]:
        return self.datasets.dataset_caches()

    def prefetch(self, datasets: Sequence[DatasetFetch], node: str | None = None) -> None:
        self.datasets.prefetch(datasets, node)

    # --- Backend -----------------------------------------------------------------

    def inventory(self) -> list[NodeInventory]:
        records = [r for r in self.commands.nodes() if in_partition(r, self.partition)]
        self._node_gres = {r["NodeName"]: node_gres(r.get("Gres", ""))[1] for r in records}
        return [node_inventory(r) for r in records]

    def allocate_ports(self, node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        if count < 0:
            raise ValueError(f"port count must be >= 0, got {count}")
        # Not one a live task of this server on the node holds (a port stays its task's).
        free = [p for p in PORT_RANGE if p not in taken] if taken else PORT_RANGE
        if len(free) < count:
            raise OSError(f"{count} ports asked for on node {node}, {len(free)} free of live tasks")
        return random.sample(free, count)

    def launch(self, task: TaskLaunch) -> None:
        self.launch_gang([task])

    def launch_gang(self, tasks: Sequence[TaskLaunch]) -> None:
        """One Slurm job for the first runs of the attempt; one per in-place re-run, and one
        per worker of an elastic role (``TaskLaunch.elastic``): a resize adds, stops or
        restarts such a worker alone, and the GPUs of one that leaves are free once Slurm
        has ended its own job, whatever the other tasks do (``observe``)."""
        if not tasks:
            return
        attempts = {(t.key.job_id, t.key.attempt) for t in tasks}
        if len(attempts) != 1:
            raise ValueError(f"a gang is the tasks of one job attempt; got tasks of {sorted(attempts)}")
        if any(task.node not in self._node_gres for task in tasks):
            self.inventory()  # e.g. the first launch of a new backend object: how to ask for the GPUs
        for task in tasks:
            submission.check_task(task, self._node_gres.get(task.node, NodeGres()))
        first_runs = [t for t in tasks if t.key.run == 0 and not t.elastic]
        if first_runs:
            self._submit(first_runs)
        for alone in (t for t in tasks if t.key.run > 0 or t.elastic):
            if alone.key.run == 0:  # where ``submission_dir`` finds it from now on
                self._own_submission_dir(alone.key).mkdir(parents=True, exist_ok=True)
            self._submit([alone])

    def observe(self, keys: Iterable[TaskKey]) -> dict[TaskKey, TaskStatus]:
        statuses: dict[TaskKey, TaskStatus] = {}
        waiting: dict[TaskKey, str] = {}  # keys whose answer is Slurm's -> Slurm job id
        killed: dict[TaskKey, TaskStatus] = {}  # ended by a signal nobody in Trainyard sent
        releasing: dict[TaskKey, str] = {}  # elastic workers that ended, until Slurm ends their job
        for key in keys:
            try:
                task_dir = self.task_dir(key)
            except ValueError as exc:
                statuses[key] = TaskStatus(key, running=False, lost=True, message=f"invalid task key: {exc}")
                continue
            if (ended := exit_status(key, task_dir)) is not None:
                statuses[key] = ended
                if self._killed_by_others(key, ended) and ended.reason != OUT_OF_MEMORY:
                    killed[key] = ended  # say why, if Slurm knows
                if (self.submission_dir(key) / ELASTIC).exists() and (job_id := self._known_job_id(key)):
                    releasing[key] = job_id
                continue
            job_id = self._known_job_id(key)
            if job_id is None:
                statuses[key] = TaskStatus(key, running=False, lost=True, message="never submitted to Slurm")
            else:
                waiting[key] = job_id
        if not waiting and not killed and not releasing:
            return self._with_image_pulls(statuses)
        try:
            if killed:  # rare, and Slurm's verdict (NODE_FAIL, CANCELLED...) is seconds old at most
                self._jobs_cache = None
            taken_at, jobs = self._slurm_jobs(set(waiting.values()) | set(releasing.values()))
        except SlurmError as exc:
            # Not knowing is not ending: keep every task as it was until Slurm answers.
            log.warning("cannot read job states from Slurm: %s", exc)
            return self._with_image_pulls(
                statuses | {k: TaskStatus(k, running=True, message=f"Slurm unreachable: {exc}")
                            for k in (*waiting, *releasing)})
        for key, ended in killed.items():
            statuses[key] = self._explain_kill(key, ended, jobs.get(self.slurm_job_id(key) or ""))
        for key, job_id in releasing.items():
            # Its GPUs are free, for Trainyard's scheduler and quotas, once Slurm's are.
            if (job := jobs.get(job_id)) is not None and not job.final:
                statuses[key] = TaskStatus(key, running=True, message=(
                    f"ended; waiting for Slurm to end job {job_id} and free its resources"))
        for key, job_id in waiting.items():
            if job_id not in jobs and self._submitted.get(job_id, -1e9) >= taken_at:
                statuses[key] = TaskStatus(key, running=True, message="submitted to Slurm")
            else:
                statuses[key] = self._status(key, job_id, jobs.get(job_id))
        return self._with_image_pulls(statuses)

    def _with_image_pulls(self, statuses: dict[TaskKey, TaskStatus]) -> dict[TaskKey, TaskStatus]:
        """Each status with how its task's image came to its node (the runner's ``image.json``)."""
        return {key: with_image_pull(status, pull_record(self.task_dir(key))) if not status.lost
                else status for key, status in statuses.items()}

    def stop(self, key: TaskKey, grace_seconds: float) -> None:
        try:
            sub_dir = self.submission_dir(key)
        except ValueError as exc:
            log.warning("ignoring a stop for an invalid task key %r: %s", key, exc)
            return
        job_id = self._known_job_id(key)
        if job_id is None:
            return
        stop_path = sub_dir / STOP
        record = read_json(stop_path)
        if record is not None and record.get("signalled"):
            return  # the whole Slurm job got its stop already (one per gang, not per task)
        if record is None:
            grace = max(0.0, float(grace_seconds))
            record = {"deadline": time.time() + grace, "grace_seconds": grace, "signalled": False}
            # Durable first: a restarted server enforces the deadline (observe) if we die now.
            submission.write_private(stop_path, json.dumps(record).encode())
        # Nothing runs yet in a pending job: cancel it outright. A running one gets SIGTERM
        # in every task's process group, from its task runner (``_relay``), then its grace.
        self.commands.scancel(job_id, state="PENDING")
        if record["grace_seconds"] <= 0:
            self._cancel_after_grace(key, job_id)
        else:
            self._relay(key, "stop", "SIGTERM", job_id)
        # A stop that failed half-way (Slurm unreachable) is sent again on the next call.
        submission.write_private(stop_path, json.dumps({**record, "signalled": True}).encode())

    def suspend(self, key: TaskKey, request: SuspendRequest) -> None:
        """Publish ``request`` to every task of this task's Slurm job that has not ended,
        then signal the job's steps once (``Suspender``; the module docstring). Nothing for
        a task that has ended or was never submitted; asked again, the files are written
        again and the signal is not. A job still pending gets no signal: its tasks find
        the file when they start."""
        try:
            sub_dir, task_dir = self.submission_dir(key), self.task_dir(key)
        except ValueError as exc:
            log.warning("ignoring a suspend request for an invalid task key %r: %s", key, exc)
            return
        if exit_status(key, task_dir) is not None:
            return
        job_id = self._known_job_id(key)
        if job_id is None:
            return
        text = json.dumps(request.as_json()).encode()
        for folder in self._live_task_dirs(key):
            self._publish_suspend(folder, text)
        record = read_json(sub_dir / SUSPEND)
        if request.signal is None or (record is not None and record.get("signalled")):
            return
        self._relay(key, "suspend", request.signal, job_id)
        submission.write_private(sub_dir / SUSPEND, json.dumps({"signal": request.signal, "signalled": True}).encode())

    @staticmethod
    def _publish_suspend(task_dir: Path, text: bytes) -> None:
        """The task's suspend request where its env says: its account's, 0400, in its
        ``.suspend`` folder when it runs as one (its work dir's owner), else in its directory."""
        suspend_dir = task_dir.with_name(task_dir.name + submission.SUSPEND_SUFFIX)
        if not suspend_dir.is_dir():
            submission.write_private(task_dir / submission.SUSPEND_FILE, text)
            return
        owner = os.stat(task_dir.with_name(task_dir.name + submission.WORK_SUFFIX))
        taskuser.publish_file(suspend_dir / submission.SUSPEND_FILE, text, (owner.st_uid, owner.st_gid))

    def _live_task_dirs(self, key: TaskKey) -> set[Path]:
        """The directories of the tasks of ``key``'s submission that have not ended."""
        task_dir = self.task_dir(key)
        names = (read_text(self.submission_dir(key) / TASKS) or "").split()  # none in jobs from before it was kept
        folders = {task_dir, *(task_dir.parent / name for name in names if _SAFE_NAME.fullmatch(name))}
        return {folder for folder in folders
                if folder.is_dir() and read_text(folder / EXIT) is None and not (folder / FAULT).exists()}

    def _relay(self, key: TaskKey, what: str, signal: str, job_id: str) -> None:
        """Have every running task runner of the Slurm job send ``signal`` to its task's
        process group, all at once (``runners.TASK_RUNNER``): its ``relay.<what>`` file
        names the signal, and SIGURG, which every other process ignores by default, tells
        the runner to look. Slurm's own ``scancel --signal`` reaches a step's processes one
        by one, deepest first, so a shell waiting on its child would end before its trap ran."""
        for folder in self._live_task_dirs(key):
            submission.write_private(folder / f"relay.{what}", signal.removeprefix("SIG").encode())
        self.commands.scancel(job_id, signal="URG", state="RUNNING")

    def exec_plan(self, key: TaskKey, node: str, command: Sequence[str], *, tty: bool) -> ExecPlan:
        """``TaskExec``: a step of its own in the task's Slurm job, on its node (``taskexec``)."""
        return taskexec.exec_plan(self.commands, self.slurm_job_id(key), self.task_dir(key), self.exec_runner, key,
                                  node, command, tty=tty, engine=self.containers)

    def read_log(self, key: TaskKey, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        try:
            path = self.task_dir(key) / "output.log"
        except ValueError:  # a key no task can have: it has no log
            return LogChunk(data=b"", offset=0, size=0, exists=False)
        return read_log_file(path, offset, limit)

    # --- internals -----------------------------------------------------------------

    def _submit(self, tasks: list[TaskLaunch]) -> None:
        key = tasks[0].key
        sub_dir = self.submission_dir(key)
        name = self.slurm_job_name(key)
        with self._locks[zlib.crc32(name.encode()) % SUBMIT_LOCKS]:
            if self._known_job_id(key) is not None:
                return  # submitted before (e.g. by this server before it restarted)
            task_dirs = {t.key: self.task_dir(t.key) for t in tasks}
            job_dir = self.job_dir(key.job_id)
            job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            for task in tasks:
                account = sandboxing.task_account(self.accounts, task, task_dirs[task.key], job_dir)
                env = self._base_env if account is None else sandboxing.account_env(account, self._site_env)
                sandboxed = account is not None and task.image is None
                agent, hosts = wiring.agent_names(task.env) if sandboxed else (None, {})
                if agent is not None:  # its own process numbering: torchrun needs it named apart
                    task = dataclasses.replace(task, env=wiring.named_agent(task.env, agent))
                data = self.datasets.prepare(task, task_dirs[task.key], pyxis=self.pyxis,
                                             inside=account is not None or task.image is not None)
                skipped = submission.write_task_files(
                    task_dirs[task.key], task, env, job_dir, self.task_python, self.containers,
                    pyxis_root=self.state_dir if self.pyxis else None, account=account, datasets=data)
                if skipped:
                    log.warning("task %s: no file for secret(s) %s: not a safe file name", task.key, ", ".join(skipped))
                if sandboxed:
                    assert account is not None
                    cache = self.datasets.root(task.node) if data[0] else None  # hidden but for its entries
                    pipe = self._share(task, task_dirs[task.key], account.user)
                    sandboxing.write_sandbox_plan(self._sandbox, self._starter, task, task_dirs[task.key], job_dir,
                                                  account, self.task_python, self.environments_root, hosts,
                                                  datasets=(data[0], cache), shared=pipe,
                                                  node_dirs=() if self.gpu_share_note else (Path(self.mps_root),))
            sub_dir.mkdir(parents=True, exist_ok=True)
            if tasks[0].elastic:
                submission.write_private(sub_dir / ELASTIC, b"")
            submission.write_private(sub_dir / TASKS, "".join(f"{d.name}\n" for d in task_dirs.values()).encode())
            argv = submission.sbatch_argv(
                name=name, submission_dir=sub_dir, partition=self.partition,
                parts=submission.components(tasks, self._node_gres), task_dirs=task_dirs,
                gang_runner=self.gang_runner, task_runner=self.task_runner, user=tasks[0].user,
            )
            # The marker says "sbatch may have run": after a crash, look for the job by
            # name before submitting again, so that nothing ever runs twice.
            submission.write_private(sub_dir / SUBMITTING, name.encode())
            try:
                job_id = self.commands.sbatch(argv)
            except SlurmError:
                # A timeout may hide a job that was created: adopt it rather than fail the task.
                found = self.commands.job_ids_named(name)
                if not found:
                    raise
                job_id = found[0]
            self._submitted[job_id] = time.monotonic()
            submission.write_private(sub_dir / JOB_ID, job_id.encode())
            log.info("submitted %s as Slurm job %s (%d task(s))", name, job_id, len(tasks))

    def _share(self, task: TaskLaunch, task_dir: Path, user: TaskUser) -> Path | None:
        """A task with part of a GPU: its ``mps.json`` (``shares``), and its pipe directory."""
        if self.gpu_share_note:
            return None
        holder = f"{task.key.job_id}-{task.key.attempt}-{task_dir.name}"
        plan = shares.share_plan(task, user, holder, root=self.mps_root, control=self.mps_control,
                                 threads=self.gpu_share_threads)
        if plan is None:
            return None
        submission.write_private(task_dir / mpsstep.PLAN, json.dumps(plan).encode())
        return shares.pipe_dir(plan)

    def check_task_account(self, user: str) -> None:
        """``TaskAccountCheck``: ValueError, naming ``user`` and the fix, when their tasks have
        no OS account to run as (asked at submit, so that the job is refused, not failed)."""
        if self.accounts is not None:
            self.accounts.account_for(user)

    def _slurm_jobs(self, needed: set[str]) -> tuple[float, dict[str, SlurmJob]]:
        """Slurm's job table and when it was read, read again once it is older than
        ``SLURM_POLL_SECONDS`` or misses a job submitted before it was read.

        The controller observes every cycle (several times a second when busy); task ends
        show up in exit files without asking Slurm, so its table is only needed for what
        happens outside the tasks (a cancel, a node failure, a job that cannot start), and
        a second of delay there keeps ``scontrol`` off the launch path.
        """
        now = time.monotonic()
        if self._jobs_cache is not None:
            taken_at, jobs = self._jobs_cache
            fresh = now - taken_at < SLURM_POLL_SECONDS
            if fresh and all(j in jobs or self._submitted.get(j, -1e9) >= taken_at for j in needed):
                return self._jobs_cache
        jobs = slurm_jobs(self.commands.jobs())
        self._jobs_cache = (now, jobs)
        # Per-job memos only matter while their job is in this table (or newer than it).
        self._submitted = {j: t for j, t in self._submitted.items() if t >= now - SLURM_POLL_SECONDS}
        self._stuck_since = {j: t for j, t in self._stuck_since.items() if j in jobs and jobs[j].pending}
        self._last_cancel = {j: t for j, t in self._last_cancel.items() if j in jobs and not jobs[j].final}
        return self._jobs_cache

    def _known_job_id(self, key: TaskKey) -> str | None:
        """The Slurm job id of this task's submission; recovers it by name after a crash."""
        sub_dir = self.submission_dir(key)
        job_id = read_text(sub_dir / JOB_ID)
        if job_id is not None or not (sub_dir / SUBMITTING).exists():
            return job_id
        found = self.commands.job_ids_named(self.slurm_job_name(key))
        if not found:
            return None
        if len(found) > 1:
            log.warning("several Slurm jobs are named %s: %s; adopting %s", self.slurm_job_name(key), found, found[0])
        submission.write_private(sub_dir / JOB_ID, found[0].encode())
        return found[0]

    def _status(self, key: TaskKey, job_id: str, job: SlurmJob | None) -> TaskStatus:
        task_dir = self.task_dir(key)
        if job is None:
            # Finished so long ago that slurmctld forgot it (MinJobAge), or its state was lost.
            if (ended := exit_status(key, task_dir)) is not None:
                return ended
            return TaskStatus(key, running=False, message=(
                f"Slurm no longer knows job {job_id} and the task recorded no exit status "
                "(it ended while Trainyard was away, or Slurm lost it)"))
        self._enforce_stop(key, job)
        if not job.final:
            if (reason := job.unstartable_reason()) is not None and self._stuck_for_good(job):
                log.warning("Slurm job %s cannot start (%s); cancelling it", job_id, reason)
                self.commands.scancel(job_id)
                return TaskStatus(key, running=False, message=(
                    f"Slurm could not start job {job_id} where it was placed: {reason}; cancelled"))
            if job.pending:
                return TaskStatus(key, running=True, message=f"pending in Slurm ({job.reasons[0]})")
            return TaskStatus(key, running=True)
        # The runner writes the task's exit file just before the step ends: look again.
        if (ended := exit_status(key, task_dir)) is not None:
            # Killed at its memory limit: that is the verdict, no need to wait for Slurm's.
            killed = self._killed_by_others(key, ended) and ended.reason != OUT_OF_MEMORY
            return self._explain_kill(key, ended, job) if killed else ended
        # The batch script's own status says nothing about the task's success: without
        # the task's exit file, only a signal counts, and "no exit status" otherwise.
        code = job.exit_code()
        code = code if code is not None and code > 128 and job.state not in PLATFORM_FAILURES else None
        if code is None and job.state == CANCELLED and not self._stopped_by_trainyard(key):
            # Someone's scancel, and Slurm killed the runner (KillWait) before it could record
            # the task's end: a deliberate end, as if by SIGTERM, never a platform fault to retry.
            code = 128 + signal.SIGTERM
        return TaskStatus(key, running=False, exit_code=code, signal=None if code is None else code - 128,
                          message=f"Slurm job {job_id} ended {job.state} without the task's own exit status",
                          reason=OUT_OF_MEMORY if job.state == OUT_OF_MEMORY else "")

    def _stuck_for_good(self, job: SlurmJob) -> bool:
        """Whether a pending job that Slurm says cannot start now never will.

        Slurm also says ``ReqNodeNotAvail`` for a moment while a required node is still
        cleaning up after another job; so a node-related reason counts only once one of
        the job's nodes is really drained, down or gone, and any reason counts once it
        has lasted ``STUCK_SECONDS``.
        """
        first_seen = self._stuck_since.setdefault(job.job_id, time.monotonic())
        if time.monotonic() - first_seen >= STUCK_SECONDS:
            return True
        states = {r["NodeName"]: r.get("State", "UNKNOWN") for r in self.commands.nodes()}
        return any(node not in states or not is_schedulable(states[node]) for node in job.nodes)

    def _killed_by_others(self, key: TaskKey, ended: TaskStatus) -> bool:
        """Whether a signal ended the task that no stop or suspension of Trainyard's sent."""
        return ended.signal is not None and not self._stopped_by_trainyard(key)

    def _stopped_by_trainyard(self, key: TaskKey) -> bool:
        sub_dir = self.submission_dir(key)
        return (sub_dir / STOP).exists() or (sub_dir / SUSPEND).exists()

    def _explain_kill(self, key: TaskKey, ended: TaskStatus, job: SlurmJob | None) -> TaskStatus:
        """A task killed by a signal Trainyard did not send: add Slurm's verdict (NODE_FAIL,
        CANCELLED, TIMEOUT...), waiting a little for it, since the task's exit file is
        written while Slurm is still tearing the job down."""
        if job is None:
            return ended
        if job.final:
            if job.state == "COMPLETED":
                return ended
            why = f"Slurm job {job.job_id} ended {job.state} ({job.reasons[0].replace('_', ' ')})"
            if job.state == OUT_OF_MEMORY:
                return dataclasses.replace(ended, message=why, reason=OUT_OF_MEMORY)
            if job.state in PLATFORM_FAILURES:
                # Whatever signal the task got, its node failed it, not its program: the
                # status says nothing of the task, which the controller retries as LOST.
                return dataclasses.replace(ended, exit_code=None, signal=None, message=why)
            return dataclasses.replace(ended, message=why)
        try:
            age = time.time() - (self.task_dir(key) / EXIT).stat().st_mtime
        except FileNotFoundError:
            age = 0.0
        if age < VERDICT_WAIT_SECONDS:
            return TaskStatus(key, running=True, message="killed by a signal; waiting for Slurm's verdict")
        return ended  # e.g. OOM-killed while the rest of its gang runs on

    def _enforce_stop(self, key: TaskKey, job: SlurmJob) -> None:
        """Cancel a stopped job whose grace period is over (the timer that survives restarts)."""
        if job.final:
            return
        record = read_json(self.submission_dir(key) / STOP)
        if record is None or time.time() < float(record.get("deadline", 0)):
            return
        now = time.monotonic()
        if now - self._last_cancel.get(job.job_id, -1e9) < CANCEL_RETRY_SECONDS:
            return
        self._last_cancel[job.job_id] = now
        log.info("Slurm job %s: grace period over; cancelling it", job.job_id)
        self._cancel_after_grace(key, job.job_id)

    def _cancel_after_grace(self, key: TaskKey, job_id: str) -> None:
        """Cancel the Slurm job of a stop whose grace period is over. Slurm's cancel sends
        SIGTERM, and SIGKILL only once slurmd has waited for the steps to end (KillWait, and at
        least 5 s whatever it says): a task that ignores SIGTERM, having had its grace, would
        hold its GPUs that much longer. Each task runner, finding ``GRACE_OVER`` at Slurm's
        SIGTERM, kills its task's process group at once (as the local backend's supervisor
        does after the grace) and records its status."""
        for folder in self._live_task_dirs(key):
            submission.write_private(folder / GRACE_OVER, b"")
        self.commands.scancel(job_id)


def _install(path: Path, text: str) -> Path:
    """Write a runner script unless it already holds exactly this text."""
    if read_text(path, strip=False) != text:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    return path
