"""Untrusted strings reach a Slurm task literally and never change how Slurm runs it."""

from __future__ import annotations

import json
import re

import pytest
from e2e.server import wait_until

from slurm.cluster import drive, ended_slurm_job, submit
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.store.rows import TaskRow

# Everything that would mean something to a shell, to sbatch's script parser, or to
# Slurm's output-file patterns.
NASTY = (
    "it's \"quoted\" $(touch {pwned}/dollar) `touch {pwned}/backtick` ${{HOME}} $HOME \\ \\n"
    "\n#SBATCH --gres=gpu:4 --nodelist=n4 --job-name=evil\n"
    "100% %j %x %N; touch {pwned}/semicolon && exit 7 | cat >&2\n"
    "'; touch {pwned}/quote; '\"; touch {pwned}/dquote; \"\t*\n"
)


def test_env_values_and_commands_reach_the_task_literally_and_never_change_the_slurm_options(world) -> None:
    pwned = world.tmp / "pwned"
    pwned.mkdir()
    out = world.tmp / "out"
    out.mkdir()
    nasty = NASTY.format(pwned=pwned)
    commands = [
        "#SBATCH --gres=gpu:4",
        "#SBATCH --nodelist=n4 --cpus-per-task=8",
        f"printf '%s' \"$NASTY\" > {out}/env",
        f"printf '%s' \"$PAI_JOB_NAME\" > {out}/name",
        # A command with quotes, %, and $(...)/backticks the user quoted: printed as written.
        f"printf '%s\\n' '$(touch {pwned}/cmd) `touch {pwned}/cmd2` 100% #SBATCH -N 4' > {out}/literal",
    ]
    spec = {
        "name": "inject",
        "jobRetryCount": 0,
        "taskRoles": {
            "main": {
                "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 64},
                "env": {"NASTY": nasty},
                "commands": commands,
            }
        },
    }
    job_id = submit(world, json.dumps(spec))
    job = drive(world, job_id)
    assert job.state == "SUCCEEDED", job.state_message
    key = TaskKey(job_id, 0, "main", 0)
    assert (out / "env").read_text() == nasty
    assert (out / "literal").read_text() == f"$(touch {pwned}/cmd) `touch {pwned}/cmd2` 100% #SBATCH -N 4\n"
    assert (out / "name").read_text() == "inject"
    assert list(pwned.iterdir()) == []
    [record] = ended_slurm_job(world.slurm, world.backend.slurm_job_id(key))
    assert record["JobName"] == world.backend.slurm_job_name(key)
    assert re.fullmatch(r"gres:gpu:i\d:1", record["TresPerNode"]) and record["NumCPUs"] == "1"
    with world.db.session() as s:
        [node] = [t.node for t in s.query(TaskRow).filter_by(job_id=job_id)]
    assert record["NodeList"] == node


def test_a_nasty_job_name_and_env_names_at_the_backend_boundary(world) -> None:
    """The job name reaches the task only as an env value; a bad env name is refused."""
    pwned = world.tmp / "pwned"
    pwned.mkdir()
    out = world.tmp / "name"
    nasty = NASTY.format(pwned=pwned)
    task = TaskLaunch(TaskKey(4242, 0, "main", 0), node="n1", memory_mb=16, cpu_milli=100,
                      script=f"printf '%s' \"$PAI_JOB_NAME\" > {out}\n", env={"PAI_JOB_NAME": nasty})
    world.backend.launch(task)
    status = wait_until(lambda: (st := world.backend.observe([task.key])[task.key]).running is False and st,
                        timeout=20, what="the task to end")
    assert status.exit_code == 0 and out.read_text() == nasty
    assert list(pwned.iterdir()) == []
    bad = TaskLaunch(TaskKey(4243, 0, "main", 0), node="n1", script="true\n", env={"A=B; touch x": "1"})
    with pytest.raises(ValueError, match="not a valid shell name"):
        world.backend.launch(bad)
