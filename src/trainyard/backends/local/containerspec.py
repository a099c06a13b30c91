"""A task's container on the local backend, as the supervisor's spec says it
(``LocalBackend._task_spec``'s ``container``): what ``containerrun`` does in the task's
process — the image, its binds, GPUs through CDI, its environment file, the engine's
commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainyard.backends.base import SUSPEND_FILE_VARIABLE, Mount, TaskLaunch
from trainyard.backends.containers import (
    ENGINE_ENV,
    ContainerError,
    ContainerTask,
    container_name,
    environment_binds,
    environment_check,
    gpu_devices,
    memory_cgroup,
    pull_record_path,
    run_command,
    write_env_file,
)
from trainyard.backends.local import containerrun
from trainyard.backends.taskuser import TaskUser
from trainyard.spec.storages import CONTAINER_SUB_PATH

if TYPE_CHECKING:
    from trainyard.backends.local.backend import LocalBackend


def container_spec(backend: LocalBackend, task: TaskLaunch, task_dir: Path, work: Path, env: dict[str, str],
                   script: Path, secrets_dir: Path, job_dir: Path, account: TaskUser | None) -> dict[str, Any]:
    """The spec's ``container``: what ``containerrun`` does in the task's process."""
    assert task.image is not None
    engine = backend.containers
    if engine is None:
        raise ContainerError(f"the task's image {task.image} needs a container engine, and none (podman or "
                             f"docker, as container_engine says) is installed on node {backend._node.name}")
    if sub := next((m for m in task.mounts if m.sub_path), None):  # refused at submit; a job stored before
        raise ContainerError(f"storage {sub.name!r}: {CONTAINER_SUB_PATH}")
    binds = (Mount(str(work), str(work)), Mount(str(job_dir), str(job_dir)),
             Mount(str(secrets_dir), str(secrets_dir), read_only=True),
             # trainyard.runtime, first on the task's PYTHONPATH (``taskpython``)
             Mount(str(backend.task_python), str(backend.task_python), read_only=True), *task.mounts,
             *backend.datasets.mounts(task.datasets),
             *environment_binds(task.environment, guarded=True))
    # The folder a suspend request appears in (``Suspender``), as the task's env names it.
    suspend_dir = os.path.dirname(env.get(SUSPEND_FILE_VARIABLE, ""))
    if suspend_dir and os.path.isdir(suspend_dir):
        binds += (Mount(suspend_dir, suspend_dir, read_only=True),)
    devices = gpu_devices(task.gpus, backend._node.gpus, backend.cdi_gpus)
    if devices:  # the container sees only these, numbered from 0; CDI, not the runtime hook, brings them
        env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(devices))),
               "NVIDIA_VISIBLE_DEVICES": "void"}
    env_file = task_dir / "container.env"
    write_env_file(env_file, env)
    container = ContainerTask(
        key=task.key, image=task.image, node=backend._node.name, work_dir=work, script=script, env_file=env_file,
        binds=binds, gpu_devices=devices,
        cpu_milli=task.cpu_milli, memory_mb=task.memory_mb, pids_max=backend.pids_max,
        user=None if account is None else (account.uid, account.gid, tuple(account.groups())),
        name_salt=str(task_dir), cgroup=memory_cgroup(container_name(task.key, str(task_dir)), task.memory_mb),
    )
    return {
        "image": task.image,
        "node": backend._node.name,
        "name": container.name,
        "record": str(task_dir / containerrun.IMAGE_RECORD),
        "exists": engine.exists_command(task.image),
        "pull": engine.pull_command(task.image),
        "run": run_command(engine, container),
        "remove": engine.remove_command(container.name),
        "engine_env": dict(ENGINE_ENV),
        "pull_record": str(pull_record_path(backend._pulls, task.image)),
        "cgroup": None if container.cgroup is None else dict(container.cgroup),
        "environment_check": environment_check(engine, container, task.environment, guarded=True),
    }

