"""Distributed wiring: the environment every task of a job gets, derived from its placement.

Pure functions, shared by every backend, so that a task sees the same variables whether it
runs as a local process or in a Slurm allocation. Three families are set:

* OpenPAI's ``PAI_*`` variables, so job files written for OpenPAI keep working;
* torchrun's ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``/``LOCAL_RANK``
  (``RANK`` counts tasks across roles in declaration order, then by index; ``LOCAL_RANK``
  counts this job's tasks on the same node);
* ``TRAINYARD_*`` for Trainyard's own tooling.

Paths only a backend knows are added by the backend, after the job's own env so that a
job file cannot redirect them: ``TRAINYARD_SECRETS_DIR`` (local) and ``TRAINYARD_JOB_DIR``
(the job's directory, kept across attempts; ``backends.jobdirs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PlacedTask:
    """One task of a job as placed: where it runs and what it was given."""

    role: str
    index: int
    node: str
    address: str
    gpus: tuple[int, ...] = ()
    ports: Mapping[str, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class JobWiring:
    """The facts about a job attempt that every task's environment is built from."""

    job_id: int
    job_name: str
    user: str
    attempt: int
    roles: Sequence[str]  # declaration order
    tasks: Sequence[PlacedTask]  # every task of the attempt
    master_port: int
    resources: Mapping[str, str] = field(default_factory=dict)  # role -> "gpu,cpu,memMB,shmMB"


def ordered_tasks(wiring: JobWiring) -> list[PlacedTask]:
    """Tasks in rank order: roles as declared, then instance index."""
    order = {role: i for i, role in enumerate(wiring.roles)}
    return sorted(wiring.tasks, key=lambda t: (order[t.role], t.index))


def task_env(wiring: JobWiring, role: str, index: int) -> dict[str, str]:
    """The wiring variables of one task (the role's own ``env`` is applied by the caller)."""
    tasks = ordered_tasks(wiring)
    rank = next(i for i, t in enumerate(tasks) if (t.role, t.index) == (role, index))
    me = tasks[rank]
    master = tasks[0]
    same_node = [t for t in tasks if t.node == me.node]
    local_rank = same_node.index(me)

    env: dict[str, str] = {
        "PAI_JOB_NAME": wiring.job_name,
        "PAI_USER_NAME": wiring.user,
        "PAI_TASK_ROLE_COUNT": str(len(wiring.roles)),
        "PAI_TASK_ROLE_LIST": ",".join(wiring.roles),
        "PAI_CURRENT_TASK_ROLE_NAME": role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_CONTAINER_HOST_IP": me.address,
        "MASTER_ADDR": master.address,
        "MASTER_PORT": str(wiring.master_port),
        "WORLD_SIZE": str(len(tasks)),
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(len(same_node)),
        "NODE_RANK": str(list(dict.fromkeys(t.node for t in tasks)).index(me.node)),
        "TRAINYARD_JOB_ID": str(wiring.job_id),
        "TRAINYARD_JOB_NAME": wiring.job_name,
        "TRAINYARD_ATTEMPT": str(wiring.attempt),
        "TRAINYARD_TASK_ROLE": role,
        "TRAINYARD_TASK_INDEX": str(index),
        "TRAINYARD_NODE": me.node,
    }
    for r in wiring.roles:
        members = [t for t in tasks if t.role == r]
        env[f"PAI_TASK_ROLE_TASK_COUNT_{r}"] = str(len(members))
        env[f"PAI_TASK_ROLE_{r}_HOST_LIST"] = ",".join(t.address for t in members)
        if r in wiring.resources:
            env[f"PAI_RESOURCE_{r}"] = wiring.resources[r]
        for t in members:
            env[f"PAI_HOST_IP_{r}_{t.index}"] = t.address
            for label, ports in t.ports.items():
                env[f"PAI_PORT_LIST_{r}_{t.index}_{label}"] = ",".join(str(p) for p in ports)
    own_ports = [p for ports in me.ports.values() for p in ports]
    if own_ports:
        env["PAI_CURRENT_CONTAINER_PORT"] = str(own_ports[0])
    return env
