"""With --task-user, jobs run as that OS user and cannot read the server's home."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server, running_server

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
        srv.work_root = work / "w"
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
    job = client.wait(client.submit(spec).id, timeout=scaled(30))
    assert job.state == "SUCCEEDED"
    out = client.logs(job.id).decode()
    assert out.splitlines()[0] == TASK_USER
    assert "LEAKED" not in out and "LISTED" not in out
    assert out.splitlines().count("denied") == 2 and out.rstrip().endswith("ok")


def test_two_servers_given_one_task_work_dir_keep_their_jobs_work_dirs_apart(guarded_server, tmp_path) -> None:
    # Both number their jobs from 1: without a folder per cluster id, their job 1s would
    # share a work dir (and the second would refuse to run, or read the first's files).
    extra = ("--task-user", TASK_USER, "--task-work-dir", str(guarded_server.work_root))
    spec = "name: where\ntaskRoles:\n  m:\n    commands:\n      - pwd\n      - echo mine > file.txt\n"
    (tmp_path / "second-home").mkdir()
    with running_server(tmp_path / "second-home", gpus=2, extra_args=extra) as second:
        servers = [guarded_server, second]
        jobs = [(srv.admin(), srv.admin().submit(spec).id) for srv in servers]
        done = [client.wait(job_id, timeout=scaled(30)) for client, job_id in jobs]
        assert [job.state for job in done] == ["SUCCEEDED", "SUCCEEDED"]
        dirs = [Path(client.logs(job.id).decode().strip()) for (client, _), job in zip(jobs, done, strict=True)]
    clusters = [next((srv.home / "local").iterdir()).name for srv in servers]
    assert clusters[0] != clusters[1]
    for work_dir, cluster, job in zip(dirs, clusters, done, strict=True):
        assert work_dir.relative_to(guarded_server.work_root).parts[:2] == (cluster, str(job.id))


def test_yard_up_refuses_an_unknown_task_user(tmp_path) -> None:
    srv = Server(home=tmp_path, port=0, database_url=None, gpus=0,
                 extra_args=("--task-user", "no-such-user-xyz"))
    out = subprocess.run(
        ["python", "-m", "trainyard.cli.main", "up", "--port", str(srv.port), "--task-user", "no-such-user-xyz"],
        env=srv.env, capture_output=True, text=True, timeout=scaled(60),
    )
    assert out.returncode == 1
    assert "no-such-user-xyz" in out.stderr and "Traceback" not in out.stderr
