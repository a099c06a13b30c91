"""Reinstalling or upgrading Trainyard under a running ``yard up`` must not break launching
(issue 13): ``pip install`` deletes the old package and writes another, and the server keeps
running the code it loaded. Where a launch truly cannot work, the job says why, and so does
the server's log."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled

import trainyard
from e2e.server import Server, running_server, wait_until

pytestmark = pytest.mark.e2e

JOB = "name: after-upgrade\ntaskRoles:\n  main:\n    commands: [echo ran job $TRAINYARD_JOB_ID]\n"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package that the server imports, as from site-packages, with its
    bytecode, as pip writes it (without, the server would compile every module as it starts)."""
    site = tmp_path / "site-packages"
    shutil.copytree(Path(trainyard.__file__).parent, site / "trainyard")
    monkeypatch.setenv("PYTHONPATH", str(site))  # the server's env is the test's (e2e.server)
    return site / "trainyard"


@pytest.fixture
def server(installed: Path, tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "home").mkdir()
    with running_server(tmp_path / "home", gpus=1) as srv:
        yield srv


def run_job(srv: Server) -> tuple[str, str, str]:
    client = srv.admin()
    job = client.wait(client.submit(JOB).id, timeout=scaled(60))
    return job.state, job.message or "", client.logs(job.id).decode()


def test_jobs_still_run_after_the_package_is_replaced_under_the_server(server: Server, installed: Path) -> None:
    assert run_job(server)[::2] == ("SUCCEEDED", "ran job 1\n")
    # What pip does: the old files go, another version's take their place. Its supervisor
    # could not even start: launches must use none of it.
    shutil.rmtree(installed)
    shutil.copytree(Path(trainyard.__file__).parent, installed, ignore=shutil.ignore_patterns("__pycache__"))
    (installed / "backends" / "local" / "supervisor.py").write_text("raise ImportError('another version')\n")
    assert run_job(server)[::2] == ("SUCCEEDED", "ran job 2\n")
    shutil.rmtree(installed)  # and an uninstall
    assert run_job(server)[::2] == ("SUCCEEDED", "ran job 3\n")


def test_a_launch_that_cannot_work_fails_the_job_saying_why_and_the_server_logs_it(server: Server) -> None:
    # Something broke the server's own copy of the supervisor (it checked it at start-up).
    [snapshot] = (server.home / "local").glob("*/supervisor/*")
    (snapshot / "trainyard" / "backends" / "local" / "taskfiles.py").write_text("import gone_missing\n")
    shutil.rmtree(snapshot / "trainyard" / "backends" / "local" / "__pycache__", ignore_errors=True)
    state, message, log = run_job(server)
    why = "No module named 'gone_missing'"
    assert state == "FAILED" and why in message, message
    assert "trainyard: the task could not start" in log and why in log
    wait_until(
        lambda: "ERROR trainyard.backends.local.backend: task 1/0/main/0/0 could not start" in server.log(),
        what="the server to log the failed launch",
    )
    assert why in server.log()
