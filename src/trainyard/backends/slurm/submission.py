"""One Slurm submission: the files its tasks read, and the ``sbatch`` argv that pins it.

A gang (the tasks of one job attempt) is one Slurm job: a heterogeneous job with one
component per node when it spans nodes, a plain job when it fits on one. Each component
asks for exactly that node (``--nodelist``) and the sum of its tasks' CPUs, memory and
GPUs: the very devices Trainyard chose where each has a GRES type of its own
(``gpu:<type>:1``), as shards of them (``shard:<type>:<milli>``) where a task there holds a
fraction, else a count per model (``Component``); the batch script then starts one step
per task with that task's own share. So the gang starts all at once or not at all, where
Trainyard's scheduler put it, and a task never sees more GPUs than it was given.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trainyard.backends.base import SUSPEND_FILE_VARIABLE, Mount, TaskKey, TaskLaunch
from trainyard.backends.containercgroup import CGROUP_INPUT, parent_path
from trainyard.backends.containers import (
    ContainerEngine,
    ContainerError,
    ContainerTask,
    container_command,
    environment_binds,
    environment_check,
    memory_options,
    run_options,
    volume,
    write_env_file,
)
from trainyard.backends.environment import ENV_NAME, python_environment
from trainyard.backends.jobdirs import JOB_DIR_VARIABLE
from trainyard.backends.mounts import make_missing_storage, mount_env, unenforced_notes
from trainyard.backends.slurm.nodes import UNTYPED_GPU_MODEL, WHOLE_GPU_SHARDS, NodeGres
from trainyard.backends.taskpython import with_runtime_path
from trainyard.backends.taskuser import TaskUser, publish_workdir, write_secret_files
from trainyard.spec.storages import CONTAINER_SUB_PATH

WHOLE_GPU_MILLI = 1000
# Beside a task's directory, when it runs as its owner's account (``TaskAccount``).
WORK_SUFFIX, SECRETS_SUFFIX, SCRIPT_SUFFIX, SUSPEND_SUFFIX = ".work", ".secrets", ".sh", ".suspend"


@dataclass(frozen=True)
class TaskAccount:
    """A task that runs as its owner's OS account, in its sandbox: the account, and the
    task's own folders beside its (root-only) directory, which the backend has made."""

    user: TaskUser
    work: Path  # 0700 ACCT: $PWD
    script: Path  # 0400 ACCT: the copy of script.sh that bash reads as the account
    secrets: Path  # 0700 ACCT, 0400 files: $TRAINYARD_SECRETS_DIR
    suspend_dir: Path  # 0711 root: the request in it is the account's, 0400

    @property
    def ids(self) -> tuple[int, int, tuple[int, ...]]:
        return self.user.uid, self.user.gid, tuple(self.user.groups())
# In a task's directory: the suspend request, once Trainyard asks ($TRAINYARD_SUSPEND_FILE).
SUSPEND_FILE = "suspend.json"
# In a task's directory: the ports it was given, one a line, checked free where it starts.
PORTS_FILE = "ports"


@dataclass(frozen=True)
class Component:
    """The part of the allocation on one node, and the tasks that run there."""

    node: str
    tasks: tuple[TaskLaunch, ...]
    node_gres: NodeGres = NodeGres()  # how the node's GPUs are asked for (``nodes.node_gres``)

    @property
    def cpus(self) -> int:
        return sum(task_cpus(t) for t in self.tasks)

    @property
    def memory_mb(self) -> int:
        return sum(task_memory_mb(t) for t in self.tasks)

    @property
    def shares(self) -> bool:
        """Whether its GPUs are asked for as shards: some task here holds a fraction of one.
        Then all of them are (a whole GPU as ``shard:<type>:1000``): Slurm 22.05 refuses
        ``gpu`` and ``shard`` in one request, and does not keep a ``gpu`` job off a device
        whose shards another job holds; pinning every device by its type keeps them apart."""
        return any(share != WHOLE_GPU_MILLI for t in self.tasks for share in task_shares(t).values())

    @property
    def gres(self) -> str:
        """``--gres`` for the whole component: what its tasks hold, summed per device."""
        held: Counter[int] = Counter()
        for task in self.tasks:
            held.update(task_shares(task))
        return self._gres(held)

    def task_gres(self, task: TaskLaunch) -> str:
        """``--gres`` for one task's step: its own devices, and its share of each."""
        return self._gres(task_shares(task))

    def _gres(self, held: Mapping[int, int]) -> str:
        types = self.node_gres.types
        if not self.node_gres.pinned:
            # Types are models: each GPU of the model it was placed on; Slurm picks which.
            return gres_of([types[i] if i < len(types) and types[i] else UNTYPED_GPU_MODEL for i in held])
        by_index = dict(zip(_pinned_indices(types), types, strict=True))
        if self.shares:
            return ",".join(f"shard:{by_index[i]}:{milli}" for i, milli in sorted(held.items()))
        return ",".join(f"gpu:{by_index[i]}:1" for i in sorted(held))


def _pinned_indices(types: Sequence[str]) -> list[int]:
    """Trainyard's index of each device of a pinned node (``i<N>``/``<model>_i<N>``: N)."""
    return [int(kind.rpartition("i")[2]) for kind in types]


def gres_of(models: Sequence[str]) -> str:
    """``--gres`` for these GPUs: ``gpu:N``, or ``gpu:TYPE:N,...`` when Slurm knows their types."""
    counts = Counter(models)
    return ",".join(f"gpu:{n}" if model == UNTYPED_GPU_MODEL else f"gpu:{model}:{n}" for model, n in counts.items())


def task_shares(task: TaskLaunch) -> dict[int, int]:
    """The task's share of each of its GPUs, by index, in thousandths (none given: whole)."""
    return dict(zip(task.gpus, task.gpu_milli or (WHOLE_GPU_MILLI,) * len(task.gpus), strict=True))


def task_cpus(task: TaskLaunch) -> int:
    """Slurm counts whole CPUs: a fractional request is rounded up, and at least one."""
    return max(1, math.ceil(task.cpu_milli / 1000))


def task_memory_mb(task: TaskLaunch) -> int:
    return max(1, task.memory_mb)  # --mem=0 would mean "all the node's memory"


def check_task(task: TaskLaunch, node_gres: NodeGres = NodeGres()) -> None:
    """Refuse what this backend cannot run as asked (ValueError with the reason)."""
    if (task.gpu_milli and len(task.gpu_milli) != len(task.gpus)) or len(set(task.gpus)) != len(task.gpus) \
            or any(not 0 < share <= WHOLE_GPU_MILLI for share in task.gpu_milli):
        raise ValueError(f"task {task.key}: GPU shares {list(task.gpu_milli)} do not match its GPUs {list(task.gpus)}")
    if node_gres.pinned:
        unknown = sorted(set(task.gpus) - set(_pinned_indices(node_gres.types)))
        if unknown:
            raise ValueError(f"task {task.key}: node {task.node} has no GPU {unknown[0]} in Slurm's GRES "
                             f"(it has {', '.join(node_gres.types)})")
    if not node_gres.shards and any(share != WHOLE_GPU_MILLI for share in task_shares(task).values()):
        raise ValueError(
            f"task {task.key}: node {task.node}'s GPUs cannot be shared in Slurm (its gres.conf declares no "
            f"per-device types with shard:<type>:{WHOLE_GPU_SHARDS}; docs/slurm.md, \"GPUs\"), and this task "
            f"was given shares {list(task.gpu_milli)} (in thousandths); ask for whole GPUs"
        )
    for name, value in task.env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ValueError(f"task {task.key}: environment variable name {name!r} is not a valid shell name")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"task {task.key}: environment variable {name}: value must be a string without NUL bytes")


def components(tasks: Sequence[TaskLaunch], gres: Mapping[str, NodeGres]) -> list[Component]:
    """Tasks grouped by node, nodes in the order their first task comes."""
    by_node: dict[str, list[TaskLaunch]] = {}
    for task in tasks:
        by_node.setdefault(task.node, []).append(task)
    return [Component(node, tuple(group), gres.get(node, NodeGres())) for node, group in by_node.items()]


def write_task_files(
    task_dir: Path, task: TaskLaunch, base_env: Mapping[str, str], job_dir: Path, task_python: Path,
    engine: ContainerEngine | None = None, pyxis_root: Path | None = None, account: TaskAccount | None = None,
    datasets: tuple[Sequence[Mount], Mapping[str, str]] = ((), {}),
) -> list[str]:
    """The task's whole env (NUL-separated ``NAME=value``: ``base_env``, then the task's Python
    environment (``python_environment``), then the job's env and wiring; the runner adds
    only Slurm's variables and the GPU pinning), its script,
    and its working directory; ``job_dir`` (made already) is its ``$TRAINYARD_JOB_DIR``,
    whatever the job's env says, ``task_python`` goes first on its ``PYTHONPATH``
    (``taskpython``), and its suspend request will be ``SUSPEND_FILE`` in ``task_dir``.
    A task with an image also gets ``container.*``: the engine's run options (its task
    directory, job directory, ``task_python`` and storages bound at their paths), the
    image, the commands that find and pull it, and its env file (the runner adds Slurm's
    variables to it), and with a memory limit the options that hold the container to it
    (``container.parent``, a cgroup the runner makes on the node; ``container.memory``, the
    engine's own where the node cannot) with the cgroup's input (``container.cgroup``),
    and with a Python environment its folders bound read-only and
    ``container.check``/``container.check_failed`` (``containers.environment_check``: the
    runner ends the task with that record when the environment cannot run in the image);
    ContainerError when no engine is configured. With ``pyxis_root``
    (the cluster has NVIDIA's Pyxis), ``container.pyxis`` instead: the ``srun
    --container-*`` options that run the whole step in the image, with ``pyxis_root`` (the
    backend's state directory: the runner, the task and job directories, ``task_python``)
    and the task's storages mounted at their paths.
    Its storages are paths every node has (``$TRAINYARD_STORAGE_*``; in a container, their
    mountPath): a home or group storage's folder is made here, and the log of a bare
    process says what Slurm cannot honour for it (read-only, mountPath).
    Its secrets are files in ``$TRAINYARD_SECRETS_DIR``. With ``account`` the task runs as
    that account in its sandbox (which mounts its storages at their mountPath): its work
    dir, secrets and suspend request are the account's, in ``account``'s folders.
    ``datasets``: the read-only mounts of its datasets' entries in its node's cache, and
    their ``$TRAINYARD_DATASET_*`` (``slurm.datasets``; a container mounts them).
    Returns the names of secrets skipped (no safe file name)."""
    task_dir.mkdir(parents=True, exist_ok=True)
    if account is None:
        work, secrets_dir, suspend_file = task_dir / "work", task_dir / "secrets", task_dir / SUSPEND_FILE
        work.mkdir(exist_ok=True)
    else:
        work, secrets_dir, suspend_file = account.work, account.secrets, account.suspend_dir / SUSPEND_FILE
    skipped = write_secret_files(secrets_dir, task.secrets, None if account is None else account.user)
    for mount in task.mounts:
        make_missing_storage(mount, *((None, None) if account is None else account.ids[:2]))
    if task.image is None and account is None and (
            notes := unenforced_notes(task.mounts, "Slurm runs this task as a bare process")):
        with open(task_dir / "output.log", "a", encoding="utf-8") as output:
            output.write("".join(note + "\n" for note in notes))
    inside = task.image is not None or account is not None
    owner = None if account is None else (account.ids[0], account.ids[1])
    workdir = publish_workdir(suspend_file.parent, task.workdir_archive, owner)
    variables = {**python_environment(base_env, task.environment), **task.env,
                 **mount_env(task.mounts, inside=inside), **datasets[1], JOB_DIR_VARIABLE: str(job_dir),
                 SUSPEND_FILE_VARIABLE: str(suspend_file), "TRAINYARD_SECRETS_DIR": str(secrets_dir), **workdir}
    variables = with_runtime_path(variables, task_python)
    env = b"".join(f"{name}={value}".encode() + b"\0" for name, value in variables.items())
    write_private(task_dir / "env", env)
    write_private(task_dir / "script.sh", task.script.encode())
    # The runner checks them free on the node before it starts the task (``runners.TASK_RUNNER``).
    write_private(task_dir / PORTS_FILE, "".join(f"{int(port)}\n" for port in task.ports).encode())
    if task.image is None:
        return skipped
    if pyxis_root is not None:
        # Checked like --volume's (``volume``): a ':' or ',' would add mounts or options.
        mounts = [volume(str(pyxis_root), str(pyxis_root), read_only=False)] + [
            volume(m.source, m.target, read_only=m.read_only)
            for m in (*task.mounts, *environment_binds(task.environment))]
        options = [f"--container-image={pyxis_image(task.image)}", f"--container-mounts={','.join(mounts)}",
                   f"--container-workdir={work}", "--no-container-mount-home"]
        write_private(task_dir / "container.pyxis", b"".join(o.encode() + b"\0" for o in options))
        return skipped
    if engine is None:
        raise ContainerError(f"the task's image {task.image} needs a container engine on the compute nodes, "
                             "and none (podman or docker, as container_engine says) was found")
    if sub := next((m for m in task.mounts if m.sub_path), None):  # refused at submit; a job stored before
        raise ContainerError(f"storage {sub.name!r}: {CONTAINER_SUB_PATH}")
    write_env_file(task_dir / "container.env", variables)
    if account is None:
        # Its directory holds its work dir, secrets and suspend request.
        own: tuple[Mount, ...] = (Mount(str(task_dir), str(task_dir)),)
    else:
        # As the local backend's containers: only the account's own folders, never the task's
        # (root's) directory. A user's own environment could be swapped for a link: bound
        # from a folder only root can change (``guarded``).
        own = (Mount(str(work), str(work)), Mount(str(secrets_dir), str(secrets_dir), read_only=True),
               Mount(str(account.suspend_dir), str(account.suspend_dir), read_only=True))
    container = ContainerTask(
        key=task.key, image=task.image, node=task.node, work_dir=work,
        script=task_dir / "script.sh" if account is None else account.script,
        env_file=task_dir / "container.step.env",
        binds=(*own, Mount(str(job_dir), str(job_dir)),
               Mount(str(task_python), str(task_python), read_only=True), *task.mounts, *datasets[0],
               *environment_binds(task.environment, guarded=account is not None)),
        cpu_milli=task.cpu_milli, name_salt=str(task_dir),
        # As the owner's account, as the local backend's containers run (root's engine, --user).
        user=None if account is None else account.ids,
    )
    nul = b"\0"
    write_private(task_dir / "container.image", task.image.encode())
    files = [("argv", run_options(engine, container)), ("command", list(container_command(engine))),
             ("exists", engine.exists_command(task.image)),
             ("pull", engine.pull_command(task.image))]
    if task.memory_mb > 0:
        # Its memory limit: a parent cgroup the runner makes on the node, where it can
        # (``containercgroup``: the plan is the node's), else the engine's own.
        files += [("memory", memory_options(replace(container, memory_mb=task.memory_mb))),
                  ("parent", memory_options(replace(container, cgroup={"relative": parent_path(container.name)})))]
        write_private(task_dir / CGROUP_INPUT,
                      json.dumps({"name": container.name, "memory_mb": task.memory_mb}).encode())
    for name, argv in files:
        write_private(task_dir / f"container.{name}", b"".join(a.encode() + nul for a in argv))
    # The runner runs the check before the task; when it fails, the failure is image.json.
    if (check := environment_check(engine, container, task.environment, guarded=account is not None)) is not None:
        write_private(task_dir / "container.check", b"".join(a.encode() + nul for a in check["argv"]))
        failed = {"image": task.image, "node": task.node, "ok": False, "seconds": 0, "error": check["error"]}
        write_private(task_dir / "container.check_failed", json.dumps(failed).encode() + b"\n")
    return skipped


def write_private(path: Path, data: bytes) -> None:
    """Write atomically, readable by the owner only (env files may hold secrets). Each
    writer has a temporary file of its own (``NAME.<random>.tmp``: the task runner skips
    names with a dot), so that two threads writing one file (the stops of a gang's tasks,
    sent side by side) never rename each other's."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sbatch_argv(
    *,
    name: str,
    submission_dir: Path,
    partition: str | None,
    parts: Sequence[Component],
    task_dirs: Mapping[TaskKey, Path],
    gang_runner: Path,
    task_runner: Path,
    user: str | None = None,
) -> list[str]:
    """sbatch's argv (options, then the fixed batch script and its argv); no shell sees it.

    ``user``: the Trainyard user whose job it is, named in Slurm's job comment
    (``trainyard:<user>``), since Slurm sees every job as the account that submits it."""
    argv: list[str] = [
        f"--job-name={name}",
        *([f"--comment=trainyard:{user}"] if user else []),
        f"--output={submission_dir / 'batch.log'}",
        "--open-mode=append",
        f"--chdir={submission_dir}",
        # Trainyard decides about retries and requeues; Slurm must not run a job twice.
        "--no-requeue",
        "--export=ALL",
    ]
    script_args: list[str] = [str(task_runner), "1" if len(parts) > 1 else "0"]
    for group, part in enumerate(parts):
        if group > 0:
            argv.append(":")
        argv += [f"--nodelist={part.node}", "--nodes=1", "--ntasks=1", f"--cpus-per-task={part.cpus}",
                 f"--mem={part.memory_mb}"]
        if part.gres:
            argv.append(f"--gres={part.gres}")
        if partition is not None:
            argv.append(f"--partition={partition}")
        for task in part.tasks:
            script_args += [str(group), str(task_cpus(task)), str(task_memory_mb(task)), part.task_gres(task) or "none",
                            str(task_dirs[task.key])]
    return [*argv, str(gang_runner), *script_args]


def pyxis_image(image: str) -> str:
    """``image`` (qualified, ``spec.checks.qualified_image``) as Pyxis and enroot read one:
    ``[REGISTRY#]IMAGE[:TAG]``, where a name without ``#`` is on Docker Hub
    (``docker.io/library/ubuntu:22.04`` -> ``library/ubuntu:22.04``,
    ``nvcr.io/nvidia/pytorch:24.01-py3`` -> ``nvcr.io#nvidia/pytorch:24.01-py3``)."""
    registry, slash, path = image.partition("/")
    if not slash or "#" in image:
        return image
    return path if registry == "docker.io" else f"{registry}#{path}"
