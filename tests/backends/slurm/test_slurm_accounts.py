"""Per-user accounts on Slurm (issue 29): each user's tasks run as their own OS account on
the node, in the local backend's bubblewrap sandbox; secrets are files only that account
reads; job directories are the owner's; a user without an account is refused at submit."""

from __future__ import annotations

import os
import pwd
import stat

import pytest

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.backends.local.sandbox import find_sandbox
from trainyard.backends.local.taskaccounts import TaskAccounts


def test_a_task_runs_as_its_owner_s_account_in_the_sandbox_with_its_secret_as_a_file(accounts_world) -> None:
    world = accounts_world
    state = world.backend.state_dir
    job_id = submit(world, f"""
name: mine
secrets: {{token: s3cret}}
taskRoles:
  main:
    commands:
      - id -un
      - cat "$TRAINYARD_SECRETS_DIR/token"; echo
      - echo saved > "$TRAINYARD_JOB_DIR/kept"
      - echo "pwd $PWD"
      - ls {state} 2>&1 | head -3; echo "state listed $(ls -A {state} 2>/dev/null | wc -l)"
      - echo "procs $(ls /proc | grep -c '^[0-9]')"
""")
    job = drive(world, job_id)
    key = TaskKey(job_id, 0, "main", 0)
    out = world.backend.read_log(key).data.decode()
    assert job.state == "SUCCEEDED", out
    lines = out.splitlines()
    assert lines[0] == "ty-alice" and lines[1] == "s3cret", out
    task_dir = world.backend.task_dir(key)
    work = task_dir.with_name(task_dir.name + ".work")
    assert f"pwd {work}" in out
    assert "state listed 0" in out  # the state dir is an empty tmpfs in the sandbox
    uid = pwd.getpwnam("ty-alice").pw_uid
    secret = task_dir.with_name(task_dir.name + ".secrets") / "token"
    assert (stat.S_IMODE(secret.stat().st_mode), secret.stat().st_uid) == (0o400, uid)
    job_dir = world.backend.job_dir(job_id)
    assert (stat.S_IMODE(job_dir.stat().st_mode), job_dir.stat().st_uid) == (0o700, uid)
    assert (stat.S_IMODE(task_dir.stat().st_mode), task_dir.stat().st_uid) == (0o700, 0)
    assert (job_dir / "kept").read_text() == "saved\n"


def test_a_user_without_an_account_is_refused_at_submit_with_the_fix(tmp_path) -> None:
    """Not a failed job: the submit (and a dry run, and a clone) answers 403 naming the user."""
    if os.geteuid() != 0:
        pytest.skip("per-user accounts need root")
    from types import SimpleNamespace

    from trainyard.backends.slurm.backend import SlurmBackend
    from trainyard.services.errors import Forbidden
    from trainyard.services.submission import check_task_account

    sandbox, why = find_sandbox("bwrap", as_root=True)
    assert sandbox is not None, why
    backend = SlurmBackend(tmp_path / "slurm", accounts=TaskAccounts({}, create=False), sandbox=sandbox)
    user = SimpleNamespace(name="nobody-mapped-here")
    with pytest.raises(Forbidden) as refused:
        check_task_account(SimpleNamespace(backend=backend), user)  # type: ignore[arg-type]
    assert "nobody-mapped-here" in str(refused.value) and "task_account_map" in str(refused.value)
    assert refused.value.status == 403


def test_pyxis_is_refused_with_per_user_accounts(tmp_path) -> None:
    """Pyxis runs a step in its image as the Slurm job's user, which is root here: never that."""
    if os.geteuid() != 0:
        pytest.skip("per-user accounts need root")
    from trainyard.backends.slurm.backend import SlurmBackend

    sandbox, why = find_sandbox("bwrap", as_root=True)
    assert sandbox is not None, why
    with pytest.raises(ValueError, match="slurm_pyxis cannot run tasks as their owners' accounts"):
        SlurmBackend(tmp_path / "slurm", accounts=TaskAccounts(), sandbox=sandbox, pyxis=True)
