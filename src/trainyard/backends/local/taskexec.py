"""``yard exec`` and ``yard shell`` in a local task: the command line that reaches into it
(``TaskExec``), from what the task's directory records (``spec.json``, ``pid.json``).

What the command shares with the task:

- a task in a container: everything, for it runs in the container (``ENGINE exec``): its
  files, processes, environment, working directory, user, GPUs and memory limit;
- a bare task: its environment (``CUDA_VISIBLE_DEVICES`` included) and working directory,
  its OS account (dropped to by ``sandboxjoin`` itself), and its cgroup, so its CPU and
  memory limits count what the command uses too; in a sandbox, also the sandbox's mount,
  PID and IPC namespaces, those of the sandbox's init, never a task's own (``sandboxjoin``):
  its view of the files (storages at their mountPath, a private /tmp and /dev/shm) and of
  its processes, and its seccomp filter (no user namespaces, unless the admin allows
  them). What runs as root on the way has a clean environment, not the task's. Not shared: the task's
  process group (a stop signals the task, not the command; the command ends with the task
  when it shares its sandbox or cgroup, whose ends kill what is left in them).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainyard.backends import sandboxjoin
from trainyard.backends.base import ExecError, ExecPlan, TaskKey
from trainyard.backends.containers import ENGINE_ENV, ContainerEngine
from trainyard.backends.local import procfs, taskfiles
from trainyard.backends.local.records import Claim
from trainyard.backends.sandbox import LAUNCH_ENV, Identity, Sandbox, enter_argv, real_interpreter

# Moves this shell into each cgroup directory before ``--``, then execs the rest: the
# command, and all it starts, then counts against the task's limits. Paths are arguments,
# never part of the script.
JOIN_CGROUP = ('while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs" || exit 126; shift; done; '
               'shift; exec "$@"')

EXEC_MARKER = "TRAINYARD_EXEC"  # in a container: ``ExecPlan.marker``
CONTAINER_SHARED = "its container: files, processes, environment, working directory, user, GPUs and limits"
PROCESS_SHARED = "its environment, working directory, OS account and cgroup"
SANDBOX_SHARED = PROCESS_SHARED + ", and its sandbox's files, /tmp, /dev/shm and processes"


def exec_plan(task_dir: Path, key: TaskKey, command: Sequence[str], *, tty: bool,
              engine: ContainerEngine | None, sandbox: Sandbox | None) -> ExecPlan:
    """How to run ``command`` in the task of ``task_dir``; ExecError when it does not run."""
    spec = taskfiles.read_json(str(task_dir / taskfiles.SPEC))
    if spec is None:
        raise ExecError(f"task {key.role}/{key.index} has no trace on this node")
    record = taskfiles.read_json(str(task_dir / taskfiles.PID))
    claim = None if record is None else Claim.parse(record)
    if (task_dir / taskfiles.EXIT).exists() or claim is None or claim.task is None \
            or not procfs.group_alive(*claim.task, claim.boot_id):
        raise ExecError(f"task {key.role}/{key.index} is not running")
    container = spec.get("container")
    if container is not None:
        if engine is None:
            raise ExecError("this node has no container engine to reach the task's container with")
        marker = f"{EXEC_MARKER}={secrets.token_hex(16)}"  # the engine leaves the command running
        options = ["--interactive", *(["--tty"] if tty else []), "--env", marker]
        return ExecPlan(tuple(engine.command("exec", *options, container["name"], *command)),
                        env=dict(ENGINE_ENV), cwd="/", shared=CONTAINER_SHARED, marker=marker)
    argv: list[str] = []
    plan = spec.get("cgroup")
    if plan is not None and all(os.path.isdir(d) for d in plan["dirs"]):
        argv += ["/bin/sh", "-c", JOIN_CGROUP, "trainyard-exec", *plan["dirs"], "--"]
    joiner = (real_interpreter(), "-I", "-S", sandboxjoin.__file__)
    spec_file = task_dir / taskfiles.SPEC
    # A bare task's command line is its shell; a sandboxed one's starts with bwrap's wrapper.
    if (spec.get("argv") or [spec["shell"]])[0] != spec["shell"]:
        bwrap = claim.task  # the process the supervisor recorded: bwrap, the task group's leader
        if sandboxjoin.find_init(*bwrap) is None:
            raise ExecError(f"task {key.role}/{key.index}'s sandbox is not up yet; try again in a moment")
        if sandbox is None:
            raise ExecError("the task runs in a sandbox, and this server has none to enter it with")
        who = spec.get("sandbox_identity")
        identity = None if who is None else Identity(int(who["uid"]), int(who["gid"]), tuple(who["groups"]))
        if identity is None and not sandbox.user_namespace:
            raise ExecError("the task was started before exec was possible; its account is unknown")
        argv += enter_argv(joiner, spec_file, spec["cwd"], command, bwrap=bwrap, identity=identity,
                           block_userns="--seccomp" in spec["argv"])
        return ExecPlan(tuple(argv), env=_clean_env(), cwd="/", shared=SANDBOX_SHARED)
    user = spec.get("user")
    if user is not None:
        identity = Identity(int(user["uid"]), int(user["gid"]), tuple(user["groups"]))
        argv += enter_argv(joiner, spec_file, spec["cwd"], command, bwrap=None, identity=identity,
                           block_userns=False)
        return ExecPlan(tuple(argv), env=_clean_env(), cwd="/", shared=PROCESS_SHARED)
    argv += command
    return ExecPlan(tuple(argv), env=_env(spec), cwd=spec["cwd"], shared=PROCESS_SHARED)


def _clean_env() -> dict[str, str]:
    """What the root processes on the way into a task run with: none of the task's
    variables, which the job sets (a root process given its ``LD_PRELOAD`` would run the
    job's library). The joiner gives the task's environment to the command alone."""
    return dict(LAUNCH_ENV)


def _env(spec: dict[str, Any]) -> dict[str, str]:
    """The task's environment, with $PWD its working directory (as its shell has it)."""
    return {**spec["env"], "PWD": spec["cwd"]}
