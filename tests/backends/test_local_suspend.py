"""The local backend's side of suspension (``Suspender``): the request file every task gets,
the signal to its process group, and ``trainyard.runtime`` on the task's own PYTHONPATH;
run as the server's account, and under task accounts in the bubblewrap sandbox."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trainyard.backends.base import SUSPEND_FILE_VARIABLE, Suspender, SuspendRequest, TaskKey, TaskLaunch
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.taskaccounts import TaskAccounts

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: nothing of Trainyard's is installed for it
needs_system_python = pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason="no /usr/bin/python3")
REQUEST = SuspendRequest("preempted for job 9", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), "SIGUSR1")


@pytest.fixture
def public_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="trainyard-suspend-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["server's account", "task account in the sandbox"])
def harness(request, tmp_path, public_dir, make_local):
    """A local backend whose tasks run as the server's account, or, as root, as the
    account ``nobody`` inside bubblewrap (the paths a task must reach are then another
    user's, behind tmpfs covers)."""
    if request.param == "server's account":
        plain = make_local(tmp_path / "state")
        plain.user, plain.uid = "", os.geteuid()
        return plain
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("task accounts need root and bubblewrap")
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    (public_dir / "home").mkdir(mode=0o700)
    accounts = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}),
                          sandbox=sandbox, work_dir_root=public_dir / "work")
    accounts.user, accounts.uid = "alice", pwd.getpwnam("nobody").pw_uid
    return accounts


def launch(harness, script: str, env: dict[str, str] | None = None, **options: object) -> TaskKey:
    key = harness.new_key()
    base = {"TRAINYARD_JOB_ID": str(key.job_id), "TRAINYARD_SUSPEND_SIGNAL": "SIGUSR1"}
    harness.backend.launch(TaskLaunch(key, harness.node, script, {**base, **(env or {})}, user=harness.user,
                                     **options))
    return key


def python_task(program: str, python: str = SYSTEM_PYTHON) -> str:
    """A suspendable task as the controller writes it: the shell's trap, then the program."""
    return f"trap : USR1\n{python} - <<'EOF'\n{textwrap.dedent(program)}\nEOF\n"


@needs_system_python
def test_a_task_that_polls_its_request_file_gets_the_request_and_exits_85(harness):
    program = """
        import time
        from trainyard import runtime
        print("ready", flush=True)
        while not runtime.should_suspend():
            time.sleep(0.01)
        print("asked:", runtime.suspend_request()["reason"], flush=True)
        runtime.suspend_done()
    """
    key = launch(harness, python_task(program), {"TRAINYARD_SUSPEND_SIGNAL": "none"})
    harness.wait_log(key, "ready")
    assert isinstance(harness.backend, Suspender)
    harness.backend.suspend(key, SuspendRequest(REQUEST.reason, REQUEST.deadline, None))  # the file alone
    status = harness.wait_ended(key)
    assert (status.exit_code, status.signal) == (85, None), harness.log(key)
    assert harness.log(key).endswith("asked: preempted for job 9\n")


@needs_system_python
def test_a_task_with_its_own_handler_finds_the_whole_request_when_the_signal_comes(harness):
    # The request is published before the signal is sent: the handler reads it at once.
    program = """
        import json, os, signal, sys, time
        def on_usr1(signum, frame):
            with open(os.environ["TRAINYARD_SUSPEND_FILE"]) as f:
                print("request", json.dumps(json.load(f), sort_keys=True), flush=True)
            sys.exit(85)
        signal.signal(signal.SIGUSR1, on_usr1)
        print("ready", flush=True)
        time.sleep(60)
    """
    key = launch(harness, python_task(program))
    request_file = Path(suspend_file(harness, key))
    assert request_file == harness.backend.work_dir(key).with_name(f"{harness.backend.work_dir(key).name}.suspend") \
        / "request.json"
    harness.wait_log(key, "ready")
    assert not request_file.exists()  # no file until Trainyard asks
    harness.backend.suspend(key, REQUEST)
    assert harness.wait_ended(key).exit_code == 85, harness.log(key)
    assert json.loads(harness.log(key).splitlines()[-1].removeprefix("request ")) == {
        "reason": "preempted for job 9", "deadline": REQUEST.deadline.timestamp(), "signal": "SIGUSR1"}
    info = os.stat(request_file)
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o400, harness.uid)  # the task's to read, not to change


def test_under_the_trap_prelude_the_shell_outlives_the_signal_its_program_does_not_handle(harness):
    program = "sh -c 'echo ready; exec sleep 60'"  # ready once the shell waits for it
    key = launch(harness, f"trap : USR1\n{program}\necho \"the shell goes on after $?\"\n")
    harness.wait_log(key, "ready")
    harness.backend.suspend(key, REQUEST)
    status = harness.wait_ended(key)
    assert status.exit_code == 0, harness.log(key)
    assert harness.log(key).endswith("the shell goes on after 138\n")  # its program died of SIGUSR1 (128 + 10)


def test_a_suspension_is_no_stop_and_asking_again_is_harmless(harness):
    key = launch(harness, 'trap "echo told" USR1\necho ready\nwhile :; do sleep 0.05; done\n', grace_seconds=30)
    harness.wait_log(key, "ready")
    harness.backend.suspend(key, REQUEST)
    harness.wait_log(key, "told")
    later = SuspendRequest("suspended by its owner", REQUEST.deadline + timedelta(seconds=5), "SIGUSR1")
    harness.backend.suspend(key, later)  # the file is replaced, though the task cannot write it
    harness.wait_until(lambda: harness.log(key).count("told") == 2)
    assert json.loads(Path(suspend_file(harness, key)).read_text())["reason"] == "suspended by its owner"
    status = harness.status(key)
    assert status.running  # the supervisor did not take it for a stop...
    assert not (harness.backend.task_dir(key) / "stop.json").exists()
    harness.backend.stop(key, 0)  # ...the controller stops it, at the deadline
    harness.wait_ended(key)
    assert json.loads((harness.backend.task_dir(key) / "exit.json").read_text())["stopped"] is True


def test_suspending_a_task_that_has_ended_or_never_existed_does_nothing(harness):
    key = launch(harness, "true\n")
    assert harness.wait_ended(key).exit_code == 0
    harness.backend.suspend(key, REQUEST)
    assert not Path(suspend_file(harness, key)).exists()
    harness.backend.suspend(TaskKey(99999, 0, "worker", 0), REQUEST)
    harness.backend.suspend(TaskKey(99999, 0, "../../etc", 0), REQUEST)  # an invalid key: logged, ignored


def suspend_file(harness, key: TaskKey) -> str:
    spec = json.loads((harness.backend.task_dir(key) / "spec.json").read_text())
    return spec["env"][SUSPEND_FILE_VARIABLE]


# -- trainyard.runtime on the task's PYTHONPATH ------------------------------------------


@needs_system_python
def test_the_system_python_imports_the_runtime_from_the_path_the_backend_gives(harness):
    program = """
        from trainyard import runtime
        print("attempt", runtime.attempt(), "resumed", runtime.resumed(), runtime.__file__)
    """
    key = launch(harness, python_task(program), {"TRAINYARD_ATTEMPT": "3", "TRAINYARD_RESUMED": "1"})
    assert harness.wait_ended(key).exit_code == 0, harness.log(key)
    copy = harness.backend.task_python / "trainyard" / "runtime.py"
    assert harness.log(key) == f"attempt 3 resumed True {copy}\n"
    assert not (copy.parent / "__init__.py").exists()  # a namespace portion, never the package


def test_the_job_s_own_pythonpath_is_kept_after_the_runtime_s(harness):
    key = launch(harness, 'echo "$PYTHONPATH"\n', {"PYTHONPATH": "/opt/mine:/opt/theirs"})
    harness.wait_ended(key)
    assert harness.log(key) == f"{harness.backend.task_python}:/opt/mine:/opt/theirs\n"


def test_a_python_with_trainyard_installed_keeps_its_own_package(local):
    # The server's interpreter has the real package (a regular one): it wins over the portion.
    key = local.launch(f"{sys.executable} -c 'import trainyard.runtime as r, trainyard.backends; print(r.__file__)'")
    assert local.wait_ended(key).exit_code == 0, local.log(key)
    found = Path(local.log(key).strip())
    assert found.parts[-2:] == ("trainyard", "runtime.py") and local.backend.task_python not in found.parents
