"""Turn placed tasks into ``TaskLaunch`` requests: the rendered script and the full env."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from trainyard.backends.base import WORKDIR_VARIABLE, DatasetFetch, Mount, PythonEnvironment, TaskKey, TaskLaunch
from trainyard.core.states import AttemptState, TaskState
from trainyard.core.wiring import JobWiring, PlacedTask, elastic_env, mpi_hosts, task_env
from trainyard.services.storages import PlannedMount
from trainyard.spec.checks import qualified_image
from trainyard.spec.models import JobSpec
from trainyard.spec.storages import storage_variable
from trainyard.spec.templating import render_role
from trainyard.store.queries import environments as env_queries
from trainyard.store.rows import AttemptRow, EnvironmentRow, JobRow, TaskRow


@dataclass(frozen=True)
class RunsIn:
    """What a task runs in: a Python environment, or an image (``yard env``); neither: the node's own."""

    environment: PythonEnvironment | None = None
    image: str | None = None


class EnvironmentGone(ValueError):
    """A job names an environment that was deleted (``--force``) after it was submitted."""


def environments_of(session: Session, spec: JobSpec) -> dict[str, RunsIn]:
    """What each environment the job names stands for now, by name (a deleted one is missing)."""
    rows = env_queries.environments_named(session, spec.environment_paths())
    return {name: runs_in(row, env_queries.environment_by_id(session, row.base_id) if row.base_id else None)
            for name, row in rows.items()}


def runs_in(env: EnvironmentRow, base: EnvironmentRow | None) -> RunsIn:
    if env.path is None:
        return RunsIn(image=None if env.image is None else qualified_image(env.image))
    bins = [f"{env.path}/bin"] + ([f"{base.path}/bin"] if base is not None and base.path else [])
    return RunsIn(environment=PythonEnvironment(prefix=env.path, bin_dirs=tuple(bins)))


def task_key(job: JobRow, attempt: AttemptRow, task: TaskRow) -> TaskKey:
    return TaskKey(job.id, attempt.number, task.role, task.index, task.run)


def _resource_string(spec: JobSpec, role: str, tasks: Sequence[TaskRow], me: TaskRow) -> str:
    """OpenPAI's ``PAI_RESOURCE_<role>`` ("gpu,cpu,memMB,shmMB"): what an instance asked
    for, or for a whole-node role what it received (this task's own, else the role's first)."""
    if spec.taskRoles[role].whole_nodes:
        members = sorted((t for t in tasks if t.role == role), key=lambda t: t.index)
        got = me if me.role == role else (members[0] if members else None)
        if got is not None:
            return f"{len(got.gpus)},{got.cpu_milli / 1000:g},{got.memory_mb},0"
    res = spec.taskRoles[role].resourcePerInstance
    return f"{res.gpu:g},{res.cpu:g},{res.memoryMB},0"


def build_launch(
    job: JobRow, attempt: AttemptRow, task: TaskRow, spec: JobSpec, addresses: dict[str, str],
    mounts: list[PlannedMount] | None = None,
    environments: Mapping[str, RunsIn] | None = None,
    storage_paths: tuple[str, ...] = (),
    workdir_archive: str | None = None,
    datasets: Sequence[DatasetFetch] = (),
) -> TaskLaunch:
    """The task's launch request; ``mounts`` are its storages as ``services.storages.task_mounts``
    resolved them at launch, and ``environments`` (``environments_of``) what the environments
    the job names stand for now, ``datasets`` what it reads from its node's cache
    (``services.datasets.task_datasets``). EnvironmentGone when one no longer exists."""
    runs = RunsIn()
    if (named := spec.environment_of(task.role)) is not None:
        if environments is None or named not in environments:
            raise EnvironmentGone(f"environment {named!r} no longer exists (it was deleted after the job was "
                                  "submitted); submit the job again in another environment")
        runs = environments[named]
    elastic = spec.elastic_role
    # An elastic job's workers are those it runs on now: not those that left, or are leaving.
    members = [t for t in attempt.tasks if elastic is None or not (t.removed or TaskState(t.state).is_final)]
    wiring = JobWiring(
        job_id=job.id,
        job_name=job.name,
        user=job.user.name,
        attempt=attempt.number,
        roles=spec.role_names,
        tasks=[
            PlacedTask(t.role, t.index, t.node, addresses.get(t.node, t.node), tuple(g[0] for g in t.gpus), t.ports)
            for t in members
        ],
        master_port=attempt.master_port or 0,
        resources={role: _resource_string(spec, role, attempt.tasks, task) for role in spec.role_names},
    )
    commands, role_env = render_role(spec, task.role)
    wired = task_env(wiring, task.role, task.index)
    env = {**wired, **role_env}
    # Trainyard's own identifiers always describe the truth, whatever the job file says.
    env.update({k: v for k, v in wired.items() if k.startswith("TRAINYARD_")})
    env["TRAINYARD_TASK_RUN"] = str(task.run)
    if elastic is not None and task.role == elastic:
        role = spec.taskRoles[elastic]
        first = next((t for t in members if t.role == elastic and t.index == 0), task)
        env.update(elastic_env(wiring, elastic, task.index, role.instances, role.maxInstances or role.instances,
                               first.resizes or 0))
    env.update(suspension_env(job, attempt, spec))
    launch_mounts = tuple(Mount(m.source, m.target, m.read_only, m.name, m.create_mode, m.root) for m in mounts or ())
    # Where each storage is on the node: a backend that mounts it elsewhere (a container, a
    # sandbox's mountPath) says so in the same variable.
    env.update({storage_variable(m.name): m.source for m in launch_mounts})
    return TaskLaunch(
        key=task_key(job, attempt, task),
        node=task.node,
        script=suspension_prelude(spec) + workdir_prelude(workdir_archive) + hostfile_prelude(wiring)
        + "\n".join(commands) + "\n",
        env=env,
        gpus=tuple(g[0] for g in task.gpus),
        grace_seconds=job.grace_seconds,
        cpu_milli=task.cpu_milli,
        memory_mb=task.memory_mb,
        gpu_milli=tuple(g[1] for g in task.gpus),
        user=job.user.name,
        secrets={name: secret_text(value) for name, value in spec.secrets.items()},
        # The job file's own image for the role wins over an image environment's.
        image=spec.role_image(task.role) or runs.image,
        mounts=launch_mounts,
        storage_paths=storage_paths,
        environment=runs.environment,
        ports=task_ports(spec, attempt, task),
        workdir_archive=workdir_archive,
        elastic=elastic is not None and task.role == elastic,
        datasets=tuple(datasets),
    )


def task_ports(spec: JobSpec, attempt: AttemptRow, task: TaskRow) -> tuple[int, ...]:
    """The ports the task listens on by its wiring: its own, and ``MASTER_PORT`` for the
    first task of the first role (where ``MASTER_ADDR`` points)."""
    ports = [port for group in (task.ports or {}).values() for port in group]
    if (task.role, task.index) == (spec.role_names[0], 0) and attempt.master_port:
        ports.append(attempt.master_port)
    return tuple(ports)


# Signals a shell ends on by default, which the task's shell must outlive when they ask its
# program to suspend: bash runs a trap only once its foreground command has ended, and a
# trapped signal is back to its default in the commands it starts.
_TRAPPED_SUSPEND_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGHUP")


def suspension_env(job: JobRow, attempt: AttemptRow, spec: JobSpec) -> dict[str, str]:
    """``TRAINYARD_SUSPEND_SIGNAL`` for a suspendable job, and ``TRAINYARD_RESUMED=1`` for an
    attempt that follows a suspended one (docs/runtime.md); the backend adds
    ``TRAINYARD_SUSPEND_FILE``."""
    env = {}
    if spec.suspendable and spec.suspendSignal != "none":
        env["TRAINYARD_SUSPEND_SIGNAL"] = spec.suspendSignal
    previous = next((a for a in job.attempts if a.number == attempt.number - 1), None)
    env["TRAINYARD_RESUMED"] = "1" if previous is not None and previous.state == AttemptState.SUSPENDED else "0"
    return env


def workdir_prelude(archive: str | None) -> str:
    """The line before the commands of a job with a working directory: unpack it here, as the
    task's own account (the archive is canonical: nothing in it leaves this folder)."""
    if archive is None:
        return ""
    return (f'tar -xzf "${WORKDIR_VARIABLE}" || {{ echo "trainyard: could not unpack the job\'s working directory '
            f'(workdir) into $PWD: the task needs tar (and gzip) on its PATH" >&2; exit 126; }}\n')


def hostfile_prelude(wiring: JobWiring) -> str:
    """The lines before a multi-task job's commands that write MPI's hostfile (a line
    ``ADDRESS slots=N`` per node, N its tasks of the job) and export its path as
    ``TRAINYARD_HOSTFILE``, ``OMPI_MCA_orte_default_hostfile`` (Open MPI's ``mpirun``) and
    ``HYDRA_HOST_FILE`` (MPICH's ``mpiexec``). Each task writes its own, in its working
    directory (``.trainyard-hostfile``; a temporary file where that is read-only): the job's
    directory stays the job's own, and no two tasks write one file."""
    if len(wiring.tasks) < 2:
        return ""
    lines = " ".join(shlex.quote(f"{host} slots={slots}") for host, slots in mpi_hosts(wiring))
    return (
        'TRAINYARD_HOSTFILE="$PWD/.trainyard-hostfile"\n'
        f"{{ printf '%s\\n' {lines} > \"$TRAINYARD_HOSTFILE\"; }} 2>/dev/null || "
        f"{{ TRAINYARD_HOSTFILE=\"$(mktemp)\" && printf '%s\\n' {lines} > \"$TRAINYARD_HOSTFILE\"; }}\n"
        'OMPI_MCA_orte_default_hostfile="$TRAINYARD_HOSTFILE"; HYDRA_HOST_FILE="$TRAINYARD_HOSTFILE"\n'
        "export TRAINYARD_HOSTFILE OMPI_MCA_orte_default_hostfile HYDRA_HOST_FILE\n"
    )


def suspension_prelude(spec: JobSpec) -> str:
    """The line before a suspendable job's commands that keeps its shell alive when the
    suspend signal comes (the program it runs handles the signal)."""
    if spec.suspendable and spec.suspendSignal in _TRAPPED_SUSPEND_SIGNALS:
        return f"trap : {spec.suspendSignal.removeprefix('SIG')}\n"
    return ""


def secret_text(value: object) -> str:
    """A secret as the text of its file: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
