"""With --task-user, jobs run as that OS user and cannot read the server's home."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest

from e2e.server import Server, free_port, running_server

pytestmark = pytest.mark.e2e

TASK_USER = "trainyard-test-task"


@pytest.fixture
def guarded_server(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("--task-user needs yard up to run as root")
    try:
        pwd.getpwnam(TASK_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", TASK_USER], check=True)
    work = tmp_path_factory.mktemp("work-root")
    os.chmod(work, 0o711)
    for parent in work.parents:  # the task user must be able to walk down to its work dir
        if parent == parent.parent:
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o011)
    extra = ("--task-user", TASK_USER, "--task-work-dir", str(work / "w"))
    with running_server(tmp_path_factory.mktemp("home"), gpus=2, extra_args=extra) as srv:
        yield srv


def test_jobs_run_as_the_task_user_and_cannot_read_the_admin_token(guarded_server: Server) -> None:
    home = guarded_server.home
    assert oct(os.stat(home).st_mode & 0o777) == "0o700"
    spec = f"""
name: snoop
taskRoles:
  m:
    commands:
      - id -un
      - cat {home}/client.json && echo LEAKED || echo denied
      - ls {home} >/dev/null 2>&1 && echo LISTED || echo denied
      - echo ok > here.txt && cat here.txt
"""
    client = guarded_server.admin()
    job = client.wait(client.submit(spec).id, timeout=30)
    assert job.state == "SUCCEEDED"
    out = client.logs(job.id).decode()
    assert out.splitlines()[0] == TASK_USER
    assert "LEAKED" not in out and "LISTED" not in out
    assert out.splitlines().count("denied") == 2 and out.rstrip().endswith("ok")


def test_yard_up_refuses_an_unknown_task_user(tmp_path) -> None:
    srv = Server(home=tmp_path, port=free_port(), database_url=None, gpus=0,
                 extra_args=("--task-user", "no-such-user-xyz"))
    out = subprocess.run(
        ["python", "-m", "trainyard.cli.main", "up", "--port", str(srv.port), "--task-user", "no-such-user-xyz"],
        env=srv.env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 1
    assert "no-such-user-xyz" in out.stderr and "Traceback" not in out.stderr
