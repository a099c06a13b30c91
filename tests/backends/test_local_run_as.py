"""``LocalBackend(run_as=...)``: tasks run as an unprivileged user that cannot read the state dir."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled

from trainyard.backends.local import procfs, taskfiles
from trainyard.backends.local.backend import LocalBackend

TASK_USER = "trainyard-test-task"


@pytest.fixture(scope="module")
def task_user() -> pwd.struct_passwd:
    """A throwaway system account, created on first use (tests run as root)."""
    if os.geteuid() != 0:
        pytest.skip("run_as needs the server, here the tests, to run as root")
    deadline = time.monotonic() + scaled(30)
    while True:
        try:
            return pwd.getpwnam(TASK_USER)
        except KeyError:
            pass
        # Another test run may be creating it at the same moment (useradd then fails on
        # the lock or "already exists"): look again until the deadline.
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", TASK_USER], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            if time.monotonic() > deadline:
                pytest.fail(f"useradd {TASK_USER} failed: {done.stderr}")
            time.sleep(0.1)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory everyone may pass through, unlike pytest's tmp_path (under a 0700 dir):
    only the backend's own permissions then keep the task user out of its state dir."""
    base = Path(tempfile.mkdtemp(prefix="trainyard-run-as-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


@pytest.fixture
def as_user(task_user, public_dir, make_local):
    harness = make_local(public_dir / "state", run_as=TASK_USER)
    yield harness
    for task_dir in (public_dir / "state" / "tasks").glob("*/*/*"):
        task = (taskfiles.read_json(str(task_dir / taskfiles.PID)) or {}).get("task")
        if task:  # a failed test must not leave a sleep 300 behind
            procfs.signal_group(task["pgid"], task["start_time"], signal.SIGKILL)


def _mode(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_uid, stat.S_IMODE(info.st_mode)


def test_a_task_runs_as_the_user_in_its_own_work_dir_and_cannot_read_the_state_dir(as_user, task_user):
    state = as_user.state_dir
    secret = state / "secret"
    secret.write_text("admin token\n")
    secret.chmod(0o644)  # only the state dir's own mode keeps it private
    key = as_user.new_key()
    task_dir = as_user.backend.task_dir(key)
    script = (
        'id -u; id -g; echo "$HOME|$USER|$LOGNAME|$PWD"\n'
        f"cat {secret} && echo READ SECRET\n"
        f"ls {state} && echo LISTED STATE\n"
        f"cat {task_dir / taskfiles.SPEC} && echo READ SPEC\n"
        f"ls {as_user.backend.work_dir_root} && echo LISTED WORK ROOT\n"
        "echo made here > made && cat made\n"
        "exit 5\n"
    )
    as_user.launch(script, key=key)
    status = as_user.wait_ended(key)
    assert (status.exit_code, status.signal) == (5, None)

    work = as_user.backend.work_dir(key)
    lines = as_user.log(key).splitlines()
    name = task_user.pw_name
    assert lines[:3] == [str(task_user.pw_uid), str(task_user.pw_gid), f"{task_user.pw_dir}|{name}|{name}|{work}"]
    assert lines[-1] == "made here"
    assert sum("Permission denied" in line for line in lines) == 4, lines
    assert not any(line.startswith(("READ", "LISTED")) for line in lines)
    assert "admin token" not in as_user.log(key)

    root = as_user.backend.work_dir_root
    assert root == state.with_name("state-work") and not root.is_relative_to(state)
    assert _mode(state) == (0, 0o700)
    assert _mode(root) == (0, 0o711)
    assert _mode(work.parent) == (0, 0o711)
    assert _mode(work) == (task_user.pw_uid, 0o700)
    assert _mode(work.with_suffix(".sh")) == (task_user.pw_uid, 0o400)
    assert os.stat(work / "made").st_uid == task_user.pw_uid
    assert _mode(task_dir / taskfiles.OUTPUT_LOG)[0] == 0  # the root supervisor opened it


def test_a_task_of_the_user_ignoring_sigterm_is_stopped_and_killed(as_user):
    key = as_user.launch("trap '' TERM\necho ready\nsleep 300 &\nwait")
    as_user.wait_log(key, "ready")
    pgid = taskfiles.read_json(str(as_user.backend.task_dir(key) / taskfiles.PID))["task"]["pgid"]
    as_user.backend.stop(key, 0.3)
    status = as_user.wait_ended(key)
    assert (status.exit_code, status.signal) == (137, 9)
    assert "Trainyard asked it to stop" in status.message
    assert not procfs.group_members(pgid)


def test_run_as_needs_root_an_existing_unprivileged_user_and_a_reachable_work_root(task_user, public_dir, tmp_path):
    with pytest.raises(ValueError, match="no OS account named 'no-such-trainyard-user'"):
        LocalBackend(public_dir / "a", gpus=[], run_as="no-such-trainyard-user")
    with pytest.raises(ValueError, match="unprivileged"):
        LocalBackend(public_dir / "b", gpus=[], run_as="root")
    os.seteuid(task_user.pw_uid)  # as a server started by an ordinary user
    try:
        with pytest.raises(ValueError, match=r"needs the server to run as root"):
            LocalBackend(public_dir / "c", gpus=[], run_as=TASK_USER)
    finally:
        os.seteuid(0)
    # pytest's tmp_path lies under a 0700 directory: the user could never reach its work dir.
    with pytest.raises(ValueError, match="cannot reach work_dir_root"):
        LocalBackend(tmp_path / "state", gpus=[], run_as=TASK_USER)
    with pytest.raises(ValueError, match="outside the state directory"):
        LocalBackend(public_dir / "d", gpus=[], run_as=TASK_USER, work_dir_root=public_dir / "d" / "work")
    shared = public_dir / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(ValueError, match="writable by no one else"):
        LocalBackend(public_dir / "e", gpus=[], run_as=TASK_USER, work_dir_root=shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777  # an existing dir is checked, never chmod'ed
    assert not any((public_dir / name).exists() for name in "abc")


def test_work_dir_root_without_run_as_only_moves_the_work_dirs(tmp_path, make_local):
    harness = make_local(tmp_path / "state", work_dir_root=tmp_path / "work")
    key = harness.launch('echo "$PWD $(id -u)"')
    assert harness.wait_ended(key).exit_code == 0
    work = tmp_path / "work" / str(key.job_id) / "0" / "worker-0-0"
    assert harness.log(key) == f"{work} {os.getuid()}\n"
    assert harness.backend.work_dir(key) == work


def test_a_task_of_the_user_cannot_kill_its_root_waiter_so_its_exit_status_is_recorded(as_user):
    key = as_user.launch('kill -KILL "$PPID" && echo KILLED THE WAITER\nexit 4')  # $PPID: the waiter
    status = as_user.wait_ended(key)
    assert (status.exit_code, status.signal) == (4, None)
    assert "Operation not permitted" in as_user.log(key) and "KILLED" not in as_user.log(key)
