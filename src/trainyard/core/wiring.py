"""Distributed wiring: the environment every task of a job gets, derived from its placement.

Pure functions, shared by every backend, so that a task sees the same variables whether it
runs as a local process or in a Slurm allocation. Three families are set:

* OpenPAI's ``PAI_*`` variables, so job files written for OpenPAI keep working;
* torchrun's ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``/``LOCAL_RANK``
  (``RANK`` counts tasks across roles in declaration order, then by index; ``LOCAL_RANK``
  counts this job's tasks on the same node);
* ``TRAINYARD_*`` for Trainyard's own tooling;
* for a job of more than one task, TensorFlow's ``TF_CONFIG`` (``tf_config``) and MPI's
  hosts (``mpi_hosts``: ``TRAINYARD_MPI_HOSTS``, and the hostfile the task's script writes,
  ``controller.launching.hostfile_prelude``) and Horovod's ranks (``horovod_env``).

Paths only a backend knows are added by the backend, after the job's own env so that a
job file cannot redirect them: ``TRAINYARD_SECRETS_DIR`` (local) and ``TRAINYARD_JOB_DIR``
(the job's directory, kept across attempts; ``backends.jobdirs``).
"""

from __future__ import annotations

import json
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
    if len(tasks) > 1:
        env["TF_CONFIG"] = tf_config(wiring, role, index)
        env["TRAINYARD_MPI_HOSTS"] = ",".join(f"{host}:{slots}" for host, slots in mpi_hosts(wiring))
        env.update(horovod_env(tasks, me))
    return env


def elastic_env(wiring: JobWiring, role: str, index: int, low: int, high: int, generation: int) -> dict[str, str]:
    """An elastic role's wiring (``instances: {min, max}``) for torchrun's elastic launch:
    ``torchrun --nnodes=$TRAINYARD_NNODES --rdzv-backend=c10d
    --rdzv-endpoint=$TRAINYARD_RDZV_ENDPOINT --rdzv-id=$TRAINYARD_RDZV_ID
    --rdzv-conf=$TRAINYARD_RDZV_CONF --local-addr=<its node's address>``
    (``TRAINYARD_TORCHRUN`` holds those flags). The rendezvous is hosted by the role's
    first worker (never removed: it is within the minimum) on its peer port, at its node's
    address; every resize starts a new one (the id counts them), at the size the job has
    now, so ``--nnodes`` is that size. ``--local-addr`` is the address the other nodes reach
    this worker at: without it torchrun tells its peers this node's host name, which need not
    resolve there (nodes that share one, a name that resolves to a loopback address)."""
    members = [t for t in wiring.tasks if t.role == role]
    host = next((t for t in members if t.index == 0), members[0])
    me = next((t for t in members if t.index == index), host)
    port = next(iter(host.ports.get(PEER_PORT_LABEL, ())), wiring.master_port)
    env = {
        "TRAINYARD_ELASTIC_MIN": str(low),
        "TRAINYARD_ELASTIC_MAX": str(high),
        "TRAINYARD_NNODES": str(len(members)),
        "TRAINYARD_RDZV_ENDPOINT": f"{host.address}:{port}",
        "TRAINYARD_RDZV_ID": f"trainyard-{wiring.job_id}-{wiring.attempt}-{generation}",
        "TRAINYARD_RDZV_CONF": f"is_host={1 if index == host.index else 0}",
        "TRAINYARD_ELASTIC_RESIZES": str(generation),
    }
    env["TRAINYARD_TORCHRUN"] = (
        f"--nnodes={env['TRAINYARD_NNODES']} --rdzv-backend=c10d --rdzv-endpoint={env['TRAINYARD_RDZV_ENDPOINT']} "
        f"--rdzv-id={env['TRAINYARD_RDZV_ID']} --rdzv-conf={env['TRAINYARD_RDZV_CONF']} "
        f"--local-addr={_agent_address(me)}"
    )
    return env


def _agent_address(me: PlacedTask) -> str:
    """The address a worker's torchrun names itself by. torchrun tells its agents apart by
    (this address, its process id): in the sandbox every task has its own process numbering
    (each agent is pid 2), so workers of one node that gave its one address looked like one
    agent and the rendezvous never filled. On a loopback address (the local backend's one
    node) each worker takes its own: all of 127.0.0.0/8 reaches this machine."""
    if me.address.startswith("127."):
        n = me.index + 1  # 1 to MAX_INSTANCES: never 127.0.0.0
        return f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"
    return me.address


AGENT_NAME = "trainyard-worker-{index}"  # an elastic worker's own host name, where it needs one


def agent_names(env: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """For an elastic worker (``elastic_env``'s variables and ``task_env``'s) that runs in a
    sandbox with its own process numbering: the host name it names itself to torchrun by,
    and every such name of its role's workers with its address, for the sandbox's
    ``/etc/hosts``. Only workers that share a node address with another of the role need
    one (a loopback address is ``_agent_address``'s: each worker takes its own): torchrun
    tells its agents apart by (address, process id), and each of them is pid 2 in its
    sandbox. A name per worker, resolving to its node's address wherever another worker
    looks it up, tells them apart and is still reached as the node (the first worker to
    rank 0 hosts the workers' store at it). A worker alone at its address takes none, but
    looks the others' up. (None, {}) when no worker needs one."""
    role, index = env.get("TRAINYARD_TASK_ROLE"), env.get("TRAINYARD_TASK_INDEX")
    if "TRAINYARD_ELASTIC_MIN" not in env or role is None or index is None:
        return None, {}
    prefix = f"PAI_HOST_IP_{role}_"
    addresses = {int(key[len(prefix):]): address for key, address in env.items()
                 if key.startswith(prefix) and key[len(prefix):].isdigit()}
    counts: dict[str, int] = {}
    for address in addresses.values():
        counts[address] = counts.get(address, 0) + 1
    names = {AGENT_NAME.format(index=i): address for i, address in sorted(addresses.items())
             if counts[address] > 1 and not address.startswith("127.")}
    mine = AGENT_NAME.format(index=index)
    return (mine if mine in names else None), names


def named_agent(env: Mapping[str, str], name: str) -> dict[str, str]:
    """``env`` with torchrun's flags naming the worker ``name`` (``agent_names``) instead of
    its node's address."""
    flags = env["TRAINYARD_TORCHRUN"].replace(f"--local-addr={env['PAI_CONTAINER_HOST_IP']}", f"--local-addr={name}")
    return {**env, "TRAINYARD_TORCHRUN": flags}


def horovod_env(tasks: Sequence[PlacedTask], me: PlacedTask) -> dict[str, str]:
    """The ranks a Horovod process reads when no launcher set them (``horovodrun`` sets the
    same for the processes it starts): its rank and the job's size, its rank and their number
    on its node, and the rank of its node among the nodes holding a process of its local rank."""
    nodes = list(dict.fromkeys(t.node for t in tasks))
    local = {node: [t for t in tasks if t.node == node] for node in nodes}
    local_rank = local[me.node].index(me)
    cross = [node for node in nodes if len(local[node]) > local_rank]
    return {
        "HOROVOD_HOSTNAME": me.address,
        "HOROVOD_RANK": str(tasks.index(me)),
        "HOROVOD_SIZE": str(len(tasks)),
        "HOROVOD_LOCAL_RANK": str(local_rank),
        "HOROVOD_LOCAL_SIZE": str(len(local[me.node])),
        "HOROVOD_CROSS_RANK": str(cross.index(me.node)),
        "HOROVOD_CROSS_SIZE": str(len(cross)),
    }


# Role names TensorFlow's cluster resolver knows, for the role names a job file naturally
# uses for them; any other role keeps its own name.
TF_ROLE_NAMES = {
    "ps": "ps", "parameter_server": "ps", "parameterserver": "ps", "server": "ps", "servers": "ps",
    "worker": "worker", "workers": "worker", "trainer": "worker", "trainers": "worker",
    "chief": "chief", "master": "chief",
    "evaluator": "evaluator", "eval": "evaluator",
}
# The port label a role declares for TensorFlow's gRPC server.
TF_PORT_LABEL = "tf"
# The port each task of a job of several tasks is given when its role declares none (for
# TensorFlow's server, or any server of its own the task's peers reach).
PEER_PORT_LABEL = "peer"


def tf_roles(roles: Sequence[str]) -> dict[str, str]:
    """Each role's name in ``TF_CONFIG``: TensorFlow's own where it maps naturally and no
    two roles would share it, else the role's name as it is."""
    mapped = {role: TF_ROLE_NAMES.get(role.lower(), role) for role in roles}
    if len(set(mapped.values())) < len(mapped):
        return {role: role for role in roles}
    return mapped


def tf_port(wiring: JobWiring, task: PlacedTask, rank: int) -> int:
    """The port of a task's TensorFlow server: its role's port labelled ``tf``, else its
    first port (its ``peer`` port when its role declares none: the controller reserves one
    for every task of a job of several tasks), else ``MASTER_PORT + rank`` (a placement
    without ports, as in the tests of this function)."""
    if ports := task.ports.get(TF_PORT_LABEL):
        return ports[0]
    for ports in task.ports.values():
        if ports:
            return ports[0]
    return wiring.master_port + rank


def tf_config(wiring: JobWiring, role: str, index: int) -> str:
    """TensorFlow's ``TF_CONFIG`` for one task: every task as ``host:port`` by role, and
    which one this is."""
    names = tf_roles(wiring.roles)
    cluster: dict[str, list[str]] = {}
    for rank, t in enumerate(ordered_tasks(wiring)):
        cluster.setdefault(names[t.role], []).append(f"{t.address}:{tf_port(wiring, t, rank)}")
    return json.dumps({"cluster": cluster, "task": {"type": names[role], "index": index}}, sort_keys=True)


def mpi_hosts(wiring: JobWiring) -> list[tuple[str, int]]:
    """MPI's hosts: each node's address (in rank order of its first task) with its number
    of the job's tasks as its slots."""
    slots: dict[str, int] = {}
    for t in ordered_tasks(wiring):
        slots[t.address] = slots.get(t.address, 0) + 1
    return list(slots.items())
