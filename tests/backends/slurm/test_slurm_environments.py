"""Environments on the Slurm backend: built by a Slurm job into the shared state directory
(``<state dir>/environments/<owner>/<name>``), then a job's step runs with its python; with
per-user accounts too, where the build runs as the owner's account in its sandbox and the
owner's folder of environments is the one place there it may write beside its job's."""

from __future__ import annotations

import os

import pytest
from api.wheels import local_requirements, tiny_wheel

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.core.clock import SystemClock
from trainyard.services import environments
from trainyard.store.rows import EnvironmentRow


@pytest.mark.parametrize("kind", ["world", "accounts_world"])
def test_an_environment_built_by_a_slurm_job_runs_a_slurm_jobs_python(kind: str,
                                                                      request: pytest.FixtureRequest) -> None:
    world = request.getfixturevalue(kind)
    # Where the build's pip finds the wheel: in the sandbox /tmp is the task's own.
    wheels = world.tmp / "wheels" if kind == "world" else request.getfixturevalue("outside_tmp") / "wheels"
    tiny_wheel(wheels, "tinypkg", 'GREETING = "hello from tinypkg"\n')
    wanted = environments.CustomEnvironment("tiny", local_requirements(wheels, "tinypkg"))
    with world.db.session() as s:
        env = environments.create_custom(s, s.merge(world.user), wanted, root=world.backend.environments_root,
                                         clock=SystemClock())
        build_job, prefix = env.build_job_id, env.path
    assert prefix == str(world.backend.state_dir / "environments" / "alice" / "tiny")
    assert build_job is not None and drive(world, build_job, timeout=180).state == "SUCCEEDED", \
        world.backend.read_log(TaskKey(build_job, 0, "build", 0)).data.decode()
    world.controller.run_once()  # the cycle after the build ended settles it
    with world.db.session() as s:
        assert s.query(EnvironmentRow).filter_by(name="tiny").one().state == "READY"

    job_id = submit(world, """
name: in-tiny
environment: tiny
taskRoles:
  main:
    commands:
      - python -c 'import tinypkg; print(tinypkg.GREETING)'
      - 'echo "python=$(command -v python) venv=$VIRTUAL_ENV"'
""")
    assert drive(world, job_id, timeout=60).state == "SUCCEEDED"
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()
    assert "hello from tinypkg" in log and f"python={prefix}/bin/python venv={prefix}" in log, log
    if kind == "accounts_world":  # built as alice's account: hers to write, everyone's to read
        owner = os.stat(world.backend.environments_root / "alice")
        assert (owner.st_uid, owner.st_mode & 0o777) == (os.stat(prefix).st_uid, 0o755) != (0, 0o755)
