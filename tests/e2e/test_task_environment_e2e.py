"""Through a real ``yard up``: a task's environment is the documented clean one, with the
site's ``task_env`` from the configuration file, never the server's own variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deadlines import scaled

from e2e.server import Server, running_server
from trainyard.backends.environment import STANDARD_PATH

pytestmark = pytest.mark.e2e

JOB = """
name: env-dump
taskRoles:
  main:
    env: {GREETING: hello, SITE_CACHE: the-jobs-own}
    commands:
      - env -0
      - 'echo "<python3: $(command -v python3)>"'
"""


def test_a_task_sees_the_documented_environment_and_nothing_of_the_servers(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    site = {"HTTPS_PROXY": "http://proxy.example:3128", "SITE_CACHE": "/scratch/cache"}
    (home / "config.yaml").write_text(yaml.safe_dump({"task_env": site}))
    venv_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{venv_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("SECRET_SERVER_VAR", "s3cret")
    with running_server(home, gpus=1) as srv:
        client = srv.admin()
        job = client.wait(client.submit(JOB).id, timeout=scaled(60))
        assert job.state == "SUCCEEDED", job.message
        out = client.logs(job.id).decode()
    dump, _, python3 = out.rpartition("<python3: ")
    env = dict(item.split("=", 1) for item in dump.split("\0") if item)
    assert env["PATH"] == STANDARD_PATH and venv_bin not in env["PATH"]
    assert not python3.startswith(venv_bin)  # a job's python3/pip are not Trainyard's
    assert env["HOME"] and env["USER"] and env["LOGNAME"] == env["USER"] and env["LANG"] == "C.UTF-8"
    assert env["HTTPS_PROXY"] == "http://proxy.example:3128"  # the site's
    assert (env["GREETING"], env["SITE_CACHE"]) == ("hello", "the-jobs-own")  # the job's, over the site's
    assert env["TRAINYARD_JOB_ID"] == str(job.id) and env["RANK"] == "0" and env["PAI_JOB_NAME"] == "env-dump"
    assert "SECRET_SERVER_VAR" not in env and not [name for name in env if name.startswith("TRAINYARD_HOME")]


def test_yard_up_refuses_a_site_variable_no_task_could_get(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task_env": {"NOT A NAME": "x"}}))
    srv = Server(home=tmp_path, port=0, database_url=None, gpus=0)
    out = subprocess.run(
        [sys.executable, "-m", "trainyard.cli.main", "up", "--port", str(srv.port)],
        env=srv.env,
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert out.returncode == 1, out.stderr
    assert "task_env: 'NOT A NAME' is not a valid environment variable name" in out.stderr
    assert "Traceback" not in out.stderr
