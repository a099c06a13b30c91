"""Supervisors start from the server's private copy of their code, so an upgrade of the
installed package cannot break launching, and a launch that fails anyway says why."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from deadlines import scaled

import trainyard
from trainyard.backends.local import taskfiles
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.launcher import LaunchError

PACKAGE = Path(trainyard.__file__).parent


def test_a_server_whose_interpreter_cannot_run_supervisors_refuses_to_start(tmp_path):
    with pytest.raises(LaunchError, match="cannot start task supervisors with /bin/false"):
        LocalBackend(tmp_path, gpus=[], python="/bin/false").check_host()


def test_tasks_launch_after_the_installed_package_is_deleted(tmp_path):
    # A server imported from a copy of the package, as from site-packages; then the copy
    # is deleted, as `pip install` does to the old version before writing the new one.
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "trainyard", ignore=shutil.ignore_patterns("__pycache__"))
    state = tmp_path / "state"
    server = textwrap.dedent(f"""
        import shutil, sys, time
        from trainyard.backends.base import TaskKey, TaskLaunch
        from trainyard.backends.local.backend import LocalBackend
        assert LocalBackend.__module__ in sys.modules and {str(site)!r} in sys.modules["trainyard"].__file__
        backend = LocalBackend({str(state)!r}, gpus=[])
        node = backend.inventory()[0].name

        def run(job):
            key = TaskKey(job, 0, "main", 0)
            backend.launch(TaskLaunch(key, node, "echo ran $TRAINYARD_JOB_ID", {{"TRAINYARD_JOB_ID": str(job)}}))
            deadline = time.monotonic() + {scaled(20)}
            while (status := backend.observe([key])[key]).running and time.monotonic() < deadline:
                time.sleep(0.02)
            print(job, status.exit_code, status.message, backend.read_log(key).data.decode().strip())

        run(1)
        shutil.rmtree({str(site / "trainyard")!r})
        run(2)
    """)
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n{server}"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 0  ran 1", "2 0  ran 2"]


def test_a_deleted_copy_of_the_supervisor_is_written_again(local):
    shutil.rmtree(local.state_dir / "supervisor")
    key = local.launch("echo still launching")
    assert local.wait_ended(key).exit_code == 0
    assert local.log(key) == "still launching\n"


def test_a_supervisor_that_cannot_start_says_why_in_the_status_the_log_and_the_server_log(local, caplog):
    # Whatever breaks the copy after the start-up check: its error must reach everyone.
    snapshot = next((local.state_dir / "supervisor").iterdir())
    (snapshot / "trainyard" / "backends" / "local" / "procfs.py").write_text("import not_a_module_anywhere\n")
    shutil.rmtree(snapshot / "trainyard" / "backends" / "local" / "__pycache__", ignore_errors=True)
    with caplog.at_level(logging.ERROR, logger="trainyard.backends.local.backend"):
        key = local.launch("echo never")
        status = local.wait_ended(key)
    assert status.exit_code is None
    why = "No module named 'not_a_module_anywhere'"
    assert "supervisor exited with status 1 before starting the task" in status.message and why in status.message
    assert f"trainyard: the task could not start: {status.message}\n" == local.log(key)
    assert [r.getMessage() for r in caplog.records if why in r.getMessage()], caplog.text
    assert why in (local.backend.task_dir(key) / taskfiles.SUPERVISOR_LOG).read_text()
    # Said once: later observers read the claim the backend left, and do not log again.
    caplog.clear()
    shutil.rmtree(snapshot)  # a new server writes a whole copy again
    assert LocalBackend(local.state_dir, gpus=[]).observe([key])[key].message == status.message
    assert not caplog.records
