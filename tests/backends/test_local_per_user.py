"""``LocalBackend(accounts=..., sandbox=...)``: each user's tasks under their own account, sandboxed."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trainyard.backends.base import TaskLaunch
from trainyard.backends.local import taskfiles
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.core.metrics import TaskSample

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="task accounts need root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


@pytest.fixture
def public_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="trainyard-per-user-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sandbox", "accounts only"])
def per_user(request, public_dir, make_local):
    sandbox = None
    if request.param == "sandbox":
        sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
        assert sandbox is not None, why
    (public_dir / "home").mkdir(mode=0o700)
    # Trainyard users map to existing accounts here, so the test creates none.
    accounts = TaskAccounts({"alice": "nobody", "bob": "daemon"})
    return make_local(public_dir / "home" / "state", accounts=accounts, sandbox=sandbox,
                      work_dir_root=public_dir / "work")


def _launch(harness, script: str, user: str, **options) -> object:
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, script, {}, user=user, **options))
    return key


def test_each_user_s_task_runs_as_their_account_with_its_secrets_as_private_files(per_user) -> None:
    script = 'id -un; cat "$TRAINYARD_SECRETS_DIR/token"; echo; ls "$TRAINYARD_SECRETS_DIR"; echo "$HOME"\n'
    keys = {
        user: _launch(per_user, script, user, secrets={"token": f"{user}-secret", "bad/name": "x"})
        for user in ("alice", "bob")
    }
    for user, account in (("alice", "nobody"), ("bob", "daemon")):
        status = per_user.wait_ended(keys[user])
        lines = per_user.log(keys[user]).splitlines()
        assert status.exit_code == 0, lines
        assert lines[:3] == [account, f"{user}-secret", "token"]  # no file for an unsafe name
        home = pwd.getpwnam(account).pw_dir  # an account without one gets its work dir as HOME
        assert lines[3] == (str(per_user.backend.work_dir(keys[user])) if home == "/nonexistent" else home)
        secret = per_user.backend.work_dir(keys[user]).with_name("worker-0-0.secrets") / "token"
        info = os.stat(secret)
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o400, pwd.getpwnam(account).pw_uid)


def test_spec_json_says_exactly_what_the_supervisor_runs(per_user) -> None:
    key = _launch(per_user, "true\n", "alice")
    per_user.wait_ended(key)
    spec = json.loads((per_user.backend.task_dir(key) / taskfiles.SPEC).read_text())
    sandboxed = "/usr/bin/bwrap" in spec["argv"]
    # Sandboxed, root enters the sandbox and the task's start drops to the account inside,
    # the chain before it running with the launch env, not the task's; else the
    # supervisor's child drops to it before exec.
    assert ("user" in spec) is not sandboxed
    if sandboxed:
        assert spec["launch_env"] == {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        assert "--drop" in spec["argv"] and "--stop" in spec["argv"]
    assert spec["argv"][-1].endswith("worker-0-0.sh")
    assert stat.S_IMODE(os.stat(per_user.backend.task_dir(key) / taskfiles.SPEC).st_mode) == 0o600


def test_a_stopped_task_gets_its_grace_and_a_task_without_a_user_is_refused(per_user) -> None:
    key = _launch(per_user, "trap 'echo got TERM; exit 7' TERM\necho ready\nsleep 60 & wait\n", "alice",
                  grace_seconds=30)
    per_user.wait_log(key, "ready")
    per_user.backend.stop(key, 30)
    status = per_user.wait_ended(key)
    assert status.exit_code == 7 and per_user.log(key).endswith("got TERM\n")
    with pytest.raises(ValueError, match="owner's Trainyard user name"):
        per_user.backend.launch(TaskLaunch(per_user.new_key(), per_user.node, "true", {}))


def test_a_job_s_directory_is_its_owner_s_alone_and_outlives_the_attempt(per_user) -> None:
    first = _launch(per_user, 'echo step-12 > "$TRAINYARD_JOB_DIR/ckpt"; echo "$TRAINYARD_JOB_DIR"\n', "alice")
    assert per_user.wait_ended(first).exit_code == 0
    job_dir = Path(per_user.log(first).strip())
    assert job_dir == per_user.backend.job_dir(first.job_id)
    info = os.stat(job_dir)
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, pwd.getpwnam("nobody").pw_uid)
    # The next attempt of alice's job resumes from it; bob's task cannot read it.
    again = dataclasses.replace(first, attempt=1)
    per_user.backend.launch(TaskLaunch(again, per_user.node, 'cat "$TRAINYARD_JOB_DIR/ckpt"\n', {}, user="alice"))
    assert per_user.wait_ended(again).exit_code == 0
    assert per_user.log(again).strip() == "step-12"
    bob = _launch(per_user, f"cat {job_dir}/ckpt || echo refused\n", "bob")
    per_user.wait_ended(bob)
    assert "step-12" not in per_user.log(bob) and "refused" in per_user.log(bob)
    # Removed after the job (its retention): with it, its attempts' working directories,
    # scripts and secrets in the work root; its tasks' logs stay.
    attempts = [per_user.backend.work_dir(key).parent for key in (first, again)]
    assert all(attempt.is_dir() for attempt in attempts)
    per_user.backend.remove_job_dir(first.job_id)
    assert not job_dir.exists() and not any(attempt.exists() for attempt in attempts)
    assert per_user.log(again).strip() == "step-12"


def test_a_task_of_another_account_is_sampled_through_its_host_pids(per_user) -> None:
    # In the sandbox the task is pid 1 of its own PID namespace; the sampler sees its host pids.
    key = _launch(per_user, "while :; do :; done &\nsleep 300\n", "alice", gpus=(0,))
    try:
        per_user.wait_until(lambda: per_user.status(key).running)

        def measured() -> TaskSample | None:
            [task] = per_user.backend.sample(datetime.now(UTC), {key: (0,)}).tasks or [None]
            return task if task is not None and task.cpu_cores else None

        task = per_user.wait_until(measured)
        assert task.cpu_cores > 0 and task.memory_mb > 0 and task.gpus_held == 1.0
        assert task.disk_read_bytes_per_s is not None  # root reads the account's /proc/PID/io
    finally:
        per_user.backend.stop(key, 0)
        per_user.wait_ended(key)
