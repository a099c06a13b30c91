"""``yard exec`` and ``yard shell`` in a Slurm task: a step of its own in the task's running
Slurm job, on the task's node, sharing the allocation (``srun --overlap``; ``--pty`` for a
terminal), that runs the command through ``EXEC_RUNNER`` with the task's environment.

What the command shares with the task: its Slurm job (allocation, node, limits as Slurm
enforces them on the job), its environment from the task's ``env`` file, its GPUs (the
pinning the task runner recorded in ``pinning``; none when it recorded none), its working
directory, and its account (its owner's, in its sandbox, when the backend runs tasks so:
``sandboxjoin`` joins it). A task with an image: its
container (``ENGINE exec``, in the step). Not with Pyxis (the step *is* the container).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainyard.backends.base import ExecError, ExecPlan, TaskKey
from trainyard.backends.containers import ENGINE_ENV, ContainerEngine
from trainyard.backends.slurm.commands import SlurmCommands, parse_records

# Usage: exec-runner.sh TASK_DIR CMD ARGS...   (installed beside the task runner; no job data)
EXEC_RUNNER = r"""#!/bin/bash
# Runs one command of `yard exec` in a Trainyard task's environment, in a Slurm step beside
# the task's (written by the Slurm backend; holds no job data). As the task runner does:
# the task's env file as literal arguments of env(1), Slurm's variables, the task's GPU
# pinning (as its runner recorded it; none when it did not). The command goes through
# `exec "$@"`, so a first word that looks like NAME=value is a command, never a variable.
set -u
dir="$1"
shift
# A sandboxed task: join its sandbox (bwrap's pid and start time, as its runner recorded
# them) as its account, with its environment (sandboxjoin.py; the backend wrote the rest of
# the argv into sandbox.join). Nothing of this step's environment reaches the command.
if [ -e "$dir/sandbox.join" ]; then
    mapfile -d '' -t join < "$dir/sandbox.join" || exit 126
    sandbox="$(cat "$dir/sandbox.pid")" || exit 126
    exec env -i -- PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM="${TERM:-dumb}" "${join[@]}" --sandbox "$sandbox" -- "$@"
fi
cd "$dir/work" || exit 126
mapfile -d '' -t assignments < "$dir/env" || exit 126
pinning=("CUDA_VISIBLE_DEVICES=" "NVIDIA_VISIBLE_DEVICES=none")
if [ -r "$dir/pinning" ]; then mapfile -d '' -t pinning < "$dir/pinning"; fi
slurm=()
for name in "${!SLURM@}"; do slurm+=("$name=${!name}"); done
exec env -i -- "${slurm[@]}" "${assignments[@]}" "${pinning[@]}" CUDA_DEVICE_ORDER=PCI_BUS_ID PWD="$dir/work" \
    TERM="${TERM:-dumb}" /bin/bash -c 'exec "$@"' trainyard-exec "$@"
"""

SHARED = "its Slurm job and node, environment, GPUs, working directory and account"
CONTAINER_SHARED = "its container (files, processes, environment, working directory), in its Slurm job"


def exec_plan(commands: SlurmCommands, job_id: str | None, task_dir: Path, exec_runner: Path, key: TaskKey,
              node: str, command: Sequence[str], *, tty: bool, engine: ContainerEngine | None) -> ExecPlan:
    """The ``srun`` that runs ``command`` in task ``key`` on ``node``; ExecError when it cannot."""
    if job_id is None or (task_dir / "exit").exists() or not (task_dir / "env").exists():
        raise ExecError(f"task {key.role}/{key.index} is not running")
    if (task_dir / "container.pyxis").exists():
        raise ExecError("commands cannot be run in a task that Pyxis runs in its image (its step is the container)")
    srun = ["srun", f"--jobid={job_id}", *_het_group(commands, job_id, node), "--overlap", f"--nodelist={node}",
            "--nodes=1", "--ntasks=1", "--quiet", "--quiet"]  # twice: not even "exited with exit code N"
    if tty:
        srun.append("--pty")
    container = task_dir / "container.argv"
    if container.exists():
        if engine is None:
            raise ExecError("this server has no container engine to reach the task's container with")
        name = _container_name(container.read_bytes().split(b"\0"))
        options = ["--interactive", *(["--tty"] if tty else [])]
        inner = ["env", "-i", "--", *(f"{k}={v}" for k, v in ENGINE_ENV.items()),
                 *engine.command("exec", *options, name, *command)]
        return ExecPlan((*srun, *inner), env=dict(commands.env), cwd="/", shared=CONTAINER_SHARED)
    return ExecPlan((*srun, "/bin/bash", str(exec_runner), str(task_dir), *command), env=dict(commands.env), cwd="/",
                    shared=SHARED)


def _het_group(commands: SlurmCommands, job_id: str, node: str) -> list[str]:
    """``--het-group=N`` for the component of a heterogeneous job on ``node`` (a gang across
    nodes is one, a component per node); nothing for a plain job."""
    done = commands.run(["scontrol", "show", "job", "--oneliner", job_id], check=False)
    if done.returncode != 0:
        raise ExecError(f"Slurm no longer knows job {job_id}: {done.stderr.strip()}")
    for record in parse_records(done.stdout):
        if record.get("HetJobOffset") and record.get("NodeList") == node:
            return [f"--het-group={record['HetJobOffset']}"]
    return []


def _container_name(argv: Sequence[bytes]) -> str:
    words = [a.decode() for a in argv]
    if "--name" in words and words.index("--name") + 1 < len(words):
        return words[words.index("--name") + 1]
    raise ExecError("the task's container has no name in its run command")
