"""One Slurm submission: the files its tasks read, and the ``sbatch`` argv that pins it.

A gang (the tasks of one job attempt) is one Slurm job: a heterogeneous job with one
component per node when it spans nodes, a plain job when it fits on one. Each component
asks for exactly that node (``--nodelist``) and the sum of its tasks' CPUs, memory and
GPUs (by type, when the node's GPUs are typed); the batch script then starts one step per
task with that task's own share. So the
gang starts all at once or not at all, where Trainyard's scheduler put it, and a task
never sees more GPUs than it was given.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.environment import ENV_NAME
from trainyard.backends.jobdirs import JOB_DIR_VARIABLE
from trainyard.backends.slurm.nodes import UNTYPED_GPU_MODEL

WHOLE_GPU_MILLI = 1000
_GPU_MODEL = re.compile(r"[A-Za-z0-9_.-]+")  # a Slurm GRES type, safe in --gres


@dataclass(frozen=True)
class Component:
    """The part of the allocation on one node, and the tasks that run there."""

    node: str
    tasks: tuple[TaskLaunch, ...]
    gpu_models: tuple[str, ...] = ()  # the node's GPUs' Slurm types, by index (empty: unknown)

    @property
    def cpus(self) -> int:
        return sum(task_cpus(t) for t in self.tasks)

    @property
    def memory_mb(self) -> int:
        return sum(task_memory_mb(t) for t in self.tasks)

    @property
    def gres(self) -> str:
        return gres_of([model for t in self.tasks for model in self.task_models(t)])

    def task_gres(self, task: TaskLaunch) -> str:
        return gres_of(self.task_models(task))

    def task_models(self, task: TaskLaunch) -> list[str]:
        """The Slurm GPU type of each GPU the task was given, so that a node with GPUs
        of several types gives the task the type it was placed on."""
        known = self.gpu_models
        return [known[i] if i < len(known) and _GPU_MODEL.fullmatch(known[i]) else UNTYPED_GPU_MODEL
                for i in task.gpus]


def gres_of(models: Sequence[str]) -> str:
    """``--gres`` for these GPUs: ``gpu:N``, or ``gpu:TYPE:N,...`` when Slurm knows their types."""
    counts = Counter(models)
    return ",".join(f"gpu:{n}" if model == UNTYPED_GPU_MODEL else f"gpu:{model}:{n}" for model, n in counts.items())


def task_cpus(task: TaskLaunch) -> int:
    """Slurm counts whole CPUs: a fractional request is rounded up, and at least one."""
    return max(1, math.ceil(task.cpu_milli / 1000))


def task_memory_mb(task: TaskLaunch) -> int:
    return max(1, task.memory_mb)  # --mem=0 would mean "all the node's memory"


def check_task(task: TaskLaunch) -> None:
    """Refuse what this backend cannot run as asked (ValueError with the reason)."""
    if any(share != WHOLE_GPU_MILLI for share in task.gpu_milli):
        raise ValueError(
            f"task {task.key}: the Slurm backend hands out whole GPUs only, and this task was given "
            f"shares {list(task.gpu_milli)} (in thousandths); ask for whole GPUs"
        )
    for name, value in task.env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise ValueError(f"task {task.key}: environment variable name {name!r} is not a valid shell name")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"task {task.key}: environment variable {name}: value must be a string without NUL bytes")


def components(tasks: Sequence[TaskLaunch], gpu_models: Mapping[str, Sequence[str]]) -> list[Component]:
    """Tasks grouped by node, nodes in the order their first task comes."""
    by_node: dict[str, list[TaskLaunch]] = {}
    for task in tasks:
        by_node.setdefault(task.node, []).append(task)
    return [Component(node, tuple(group), tuple(gpu_models.get(node, ()))) for node, group in by_node.items()]


def write_task_files(task_dir: Path, task: TaskLaunch, base_env: Mapping[str, str], job_dir: Path) -> None:
    """The task's whole env (NUL-separated ``NAME=value``: ``base_env``, then the job's env
    and wiring; the runner adds only Slurm's variables and the GPU pinning), its script,
    and its working directory; ``job_dir`` (made already) is its ``$TRAINYARD_JOB_DIR``,
    whatever the job's env says."""
    (task_dir / "work").mkdir(parents=True, exist_ok=True)
    variables = {**base_env, **task.env, JOB_DIR_VARIABLE: str(job_dir)}
    env = b"".join(f"{name}={value}".encode() + b"\0" for name, value in variables.items())
    write_private(task_dir / "env", env)
    write_private(task_dir / "script.sh", task.script.encode())


def write_private(path: Path, data: bytes) -> None:
    """Write atomically, readable by the owner only (env files may hold secrets)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sbatch_argv(
    *,
    name: str,
    submission_dir: Path,
    partition: str | None,
    parts: Sequence[Component],
    task_dirs: Mapping[TaskKey, Path],
    gang_runner: Path,
    task_runner: Path,
) -> list[str]:
    """sbatch's argv (options, then the fixed batch script and its argv); no shell sees it."""
    argv: list[str] = [
        f"--job-name={name}",
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
