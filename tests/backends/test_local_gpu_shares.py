"""Enforced GPU shares on the local backend (issue 36): one MPS daemon per user per node,
against the MPS stand-in (``tests/standins/mps.py``) and NVML's (eight fake H100s)."""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from standins.mps import CLIENT, CONTROL, records

from trainyard.api.server import log_gpu_shares
from trainyard.backends import mps
from trainyard.backends.base import TaskLaunch
from trainyard.backends.gpushares import find_enforcement
from trainyard.backends.local import gpus as local_gpus
from trainyard.backends.local.doctor import check_gpu_shares
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.core.settings import Settings
from trainyard.services.jobs import backend_warnings
from trainyard.spec.models import JobSpec

H100_MIB = 81559  # NVML's stand-in
QUARTER_MIB = H100_MIB * 250 // 1000


def _job(gpu: float, **role: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "taskRoles": {"main": {
        "resourcePerInstance": {"gpu": gpu, "cpu": 1, "memoryMB": 1024}, "commands": ["true"], **role}}})


def test_where_mps_is_missing_the_backend_says_so_and_every_fractional_job_is_warned(fake_nvml, tmp_path) -> None:
    gpus = local_gpus.discover_nvidia_gpus()
    off = find_enforcement("off", gpus, str(tmp_path), control=str(CONTROL))
    missing = find_enforcement("auto", gpus, str(tmp_path), control=None)  # no nvidia-cuda-mps-control here
    simulated = find_enforcement("auto", local_gpus.simulated_gpus(2), str(tmp_path), control=str(CONTROL))
    assert "gpu_share_enforcement: off" in off.note
    assert "nvidia-cuda-mps-control is not installed" in missing.note
    assert "no NVIDIA GPU here" in simulated.note
    on = find_enforcement("auto", gpus, str(tmp_path), threads=True, control=str(CONTROL))
    assert on.note == "" and "enforced by NVIDIA MPS" in on.summary and "compute" in on.summary
    # Per job: a warning on a job with a fractional GPU, none on whole GPUs or where enforced.
    assert backend_warnings(_job(0.5), "local", missing.note) == [missing.note]
    assert backend_warnings(_job(1), "local", missing.note) == []
    assert backend_warnings(_job(0.5), "local", on.note) == []
    assert backend_warnings(_job(0.5), "simulated", None) == []  # a backend that runs no task
    assert backend_warnings(_job(0.5, image="ubuntu:22.04"), "local", on.note) == [
        "taskRoles.main: its GPU share is not enforced in a container (MPS holds bare tasks to their share); "
        "it can use the whole device"]
    # And `yard doctor`: a warning with the fix (no nvidia-cuda-mps-control on this machine's PATH).
    check = check_gpu_shares(Settings(home=tmp_path), gpus)
    assert (check.status.name, check.detail) == ("WARN", missing.note) and "nvidia-cuda-mps-control" in check.fix


def test_a_share_without_mps_runs_as_before(fake_nvml, make_local, tmp_path, caplog) -> None:
    harness = make_local(tmp_path / "state", mps_control=None, gpu_shares=("off", False))
    with caplog.at_level(logging.INFO):
        log_gpu_shares(harness.backend)  # yard up's line, beside the isolation's
    assert ("WARNING", harness.backend.gpu_share_note) in [(r.levelname, r.getMessage()) for r in caplog.records]
    assert harness.backend.gpu_share_note.startswith("fractional GPU shares are not enforced (gpu_share_enforcement")
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, "env | grep ^CUDA_ | sort\n", {}, gpus=(0,),
                                      gpu_milli=(500,)))
    assert harness.wait_ended(key).exit_code == 0
    assert harness.log(key).split() == ["CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0"]


@pytest.fixture
def public_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="trainyard-mps-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="task accounts need root")
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_each_user_gets_one_daemon_as_their_account_and_each_task_its_share(fake_nvml, make_local,
                                                                            public_dir) -> None:
    (public_dir / "home").mkdir(mode=0o700)
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody", "bob": "daemon"}),
                         sandbox=sandbox, work_dir_root=public_dir / "work", mps_control=str(CONTROL),
                         gpu_shares=("auto", True))
    root = Path(harness.backend.gpu_shares.root)
    gate = public_dir / "gate"
    other_pipe = root / f"{pwd.getpwnam('daemon').pw_uid}-bob" / "pipe"
    # The client from where every account's sandbox sees it (a checkout under /tmp or /root is hidden).
    client = public_dir / CLIENT.name
    shutil.copy(CLIENT, client)
    client.chmod(0o755)
    # Each task reports what it got, then waits (all four run at once) until the test opens the gate.
    script = (f"{client} {H100_MIB} $ALLOC; echo rc=$?; ls {other_pipe} > /dev/null 2>&1 || echo other-pipe-closed\n"
              f"while [ ! -e {gate} ]; do sleep 0.05; done\n")

    def launch(user: str, gpus: tuple[int, ...], milli: tuple[int, ...], alloc: int) -> object:
        key = harness.new_key()
        harness.backend.launch(TaskLaunch(key, harness.node, script, {"ALLOC": str(alloc)}, gpus=gpus,
                                          gpu_milli=milli, user=user))
        return key

    quarter = launch("alice", (0,), (250,), QUARTER_MIB + 1)  # one MiB past its share: CUDA's OOM
    half = launch("alice", (0,), (500,), QUARTER_MIB + 1)  # within its share, on the same device
    bob = launch("bob", (0,), (250,), 100)
    whole = launch("alice", (1,), (1000,), H100_MIB)
    for key in (quarter, half, bob, whole):
        harness.wait_log(key, "rc=")
    gate.touch()
    for key in (quarter, half, bob, whole):
        assert harness.wait_ended(key).exit_code == 0, harness.log(key)

    def report(key: object) -> dict:
        return json.loads(harness.log(key).splitlines()[0])

    uid = {user: pwd.getpwnam(account).pw_uid for user, account in (("alice", "nobody"), ("bob", "daemon"))}
    for key, user, mib, threads in ((quarter, "alice", QUARTER_MIB, "25"), (half, "alice", H100_MIB // 2, "50"),
                                    (bob, "bob", QUARTER_MIB, "25")):
        got = report(key)
        # The task's own limits, its device named by UUID; a client of its owner's daemon alone.
        assert (got["memory"], got["threads"]) == (f"GPU-fake-0000={mib}M", threads)
        assert got["pipe"] == str(root / f"{uid[user]}-{user}" / "pipe")
        assert got["daemon"] == {"owner": uid[user], "control": True}  # bound into its sandbox
    assert "CUDA error: out of memory" in harness.log(quarter) and "rc=2" in harness.log(quarter)
    assert "allocated" in harness.log(half) and "rc=0" in harness.log(half)
    assert "other-pipe-closed" in harness.log(quarter)  # alice's task cannot reach bob's daemon
    assert report(whole)["pipe"] is None and report(whole)["memory"] is None  # whole GPUs: untouched
    for user in ("alice", "bob"):
        pipe = os.stat(root / f"{uid[user]}-{user}" / "pipe")
        assert (stat.S_IMODE(pipe.st_mode), pipe.st_uid) == (0o700, uid[user])

    told = records(root)
    starts = [r for r in told if r["event"] == "start"]
    assert sorted(r["uid"] for r in starts) == sorted(uid.values())  # once per user, as that user
    daemons = [r for r in told if r["event"] == "daemon"]
    assert all(not r["sigmask"] for r in daemons)  # nothing of the waiter's blocked signals
    alice = [r for r in told if r["uid"] == uid["alice"] and r["event"] == "commands"]
    commands = [c for r in alice for c in r["commands"]]
    # The daemon holds alice to what she holds on device 0 in all, while both shares run.
    assert f"set_default_device_pinned_mem_limit 0 {QUARTER_MIB + H100_MIB // 2}M" in commands
    assert "set_default_active_thread_percentage 75" in commands
    # Quit once, after her last shared task; the daemon is gone.
    assert commands.count("quit") == 1 and alice[-1]["commands"] == ["quit"]
    for user in ("alice", "bob"):
        assert not (root / f"{uid[user]}-{user}" / "pipe" / "nvidia-cuda-mps-control.pid").exists()


def test_a_lost_task_does_not_hold_the_daemon_and_a_planted_link_is_refused(tmp_path) -> None:
    root = tmp_path / "mps"
    me = f"{os.geteuid()}-alice"
    plan = {"control": str(CONTROL), "root": str(root), "key": me, "uid": os.geteuid(), "gid": os.getegid(),
            "groups": [], "holder": "1-0-worker-0-0", "clients": [["0", 100]], "devices": [[0, 100]], "threads": None}
    assert mps.acquire(plan, os.getpid()) == []
    # A task whose waiter was killed before it could release: its holder names a dead process.
    lost = {**plan, "holder": "2-0-worker-0-0"}
    (root / me / "holders" / lost["holder"]).write_text(json.dumps(
        {"pid": 2 ** 22 + 1, "start": 1, "devices": [[0, 100]], "threads": None}))
    assert mps.release(plan) == []  # the last live holder: quit, the lost one notwithstanding
    assert [r["commands"] for r in records(root) if r["event"] == "commands"][-1] == ["quit"]
    assert not (root / me / "pipe" / mps.PID_FILE).exists()
    # Whoever planted a link where the user's pipe directory goes gets no daemon through it.
    shutil.rmtree(root / me / "pipe")
    (root / me / "pipe").symlink_to(tmp_path)
    notes = mps.acquire(plan, os.getpid())
    assert len(notes) == 1 and notes[0].startswith(mps.NOT_ENFORCED) and "not a folder owned by uid" in notes[0]
    # Nor does a key that is not a uid and a user name become a path.
    for key in (f"{os.geteuid()}-../../etc", f"{os.geteuid() + 1}-alice", "x"):
        assert "not a key of a user's MPS folder" in mps.acquire({**plan, "key": key}, os.getpid())[0]


def _plan(root: Path, holder: str = "1-0-worker-0-0") -> dict:
    return {"control": str(CONTROL), "root": str(root), "key": f"{os.geteuid()}-alice", "uid": os.geteuid(),
            "gid": os.getegid(), "groups": [], "holder": holder, "clients": [["0", 100]], "devices": [[0, 100]],
            "threads": None}


def test_root_never_follows_or_blocks_on_what_the_user_put_as_the_daemon_pid_file(tmp_path) -> None:
    """The pipe directory is the user's (and bound writable into their tasks): the pid file
    root reads there may be a FIFO (root's open would wait for ever, the waiter's stop
    signals blocked, the user's lock held) or a link to a device or another's file, which
    root must never open."""
    import threading

    plan = _plan(tmp_path / "mps")
    mps.prepare(plan)
    pid_file = Path(mps.pipe_dir(plan)) / mps.PID_FILE
    os.mkfifo(pid_file)
    done: list[bool] = []
    reader = threading.Thread(target=lambda: done.append(mps._daemon_alive(plan)), daemon=True)
    reader.start()
    reader.join(5)
    blocked = not done
    if blocked:  # unblock the thread that root's open left waiting
        os.close(os.open(pid_file, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(5)
    assert not blocked, "root's waiter blocked on a FIFO the user put where the daemon's pid file goes"
    assert done == [False]
    # A link to a file that holds a live pid of the user's: root does not read through it.
    pid_file.unlink()
    target = tmp_path / "elsewhere"
    target.write_text(f"{os.getpid()}\n")
    pid_file.symlink_to(target)
    assert mps._daemon_alive(plan) is False
    # A real file of the user's with a live pid of theirs: as before.
    pid_file.unlink()
    pid_file.write_text(f"{os.getpid()}\n")
    assert mps._daemon_alive(plan) is True


@pytest.mark.skipif(os.geteuid() != 0, reason="a shared task account needs root")
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_users_who_share_one_account_never_reach_each_others_daemon(fake_nvml, make_local, public_dir) -> None:
    """With one account for every task (run_as), the pipe directories' 0700 keeps no Trainyard
    user from another's: the sandbox must not show the MPS root, only the task's own pipe
    directory (else bob's task becomes a client of alice's daemon, in her GPU context, and can
    quit it or raise her limits)."""
    (public_dir / "home").mkdir(mode=0o700)
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", run_as="nobody", sandbox=sandbox,
                         work_dir_root=public_dir / "work", mps_control=str(CONTROL), gpu_shares=("auto", False))
    root = Path(harness.backend.gpu_shares.root)
    nobody = pwd.getpwnam("nobody").pw_uid
    gate = public_dir / "gate"
    alice_pipe = root / f"{nobody}-alice" / "pipe"
    alice = harness.new_key()
    harness.backend.launch(TaskLaunch(alice, harness.node, f"echo up; while [ ! -e {gate} ]; do sleep 0.05; done\n",
                                      {}, gpus=(0,), gpu_milli=(250,), user="alice"))
    harness.wait_log(alice, "up")
    bob = harness.new_key()
    harness.backend.launch(TaskLaunch(bob, harness.node, f"ls -a {alice_pipe} && echo reached-alice; ls {root}; "
                                      f"echo $CUDA_MPS_PIPE_DIRECTORY\n", {}, gpus=(0,), gpu_milli=(250,), user="bob"))
    try:
        assert harness.wait_ended(bob).exit_code == 0, harness.log(bob)
    finally:
        gate.touch()
    assert harness.wait_ended(alice).exit_code == 0, harness.log(alice)
    assert str(root / f"{nobody}-bob" / "pipe") in harness.log(bob)
    assert "reached-alice" not in harness.log(bob) and mps.PID_FILE not in harness.log(bob), harness.log(bob)


def test_a_forged_pid_file_does_not_keep_the_daemon_after_the_users_last_task(tmp_path) -> None:
    """The pid file is the user's to write (their tasks have the pipe directory): one that
    names no live process of theirs must not make root skip the ``quit`` after the last task,
    which left the daemon running as the user, outside every sandbox, for ever."""
    root = tmp_path / "mps"
    plan = _plan(root)
    assert mps.acquire(plan, os.getpid()) == []
    pid_file = Path(mps.pipe_dir(plan)) / mps.PID_FILE
    daemon = int(pid_file.read_text())
    try:
        pid_file.write_text(f"{2 ** 22 + 1}\n")  # what a task of the user wrote there
        mps.release(plan)
        told = [r["commands"] for r in records(root) if r["event"] == "commands"]
        assert told[-1] == ["quit"], told  # the daemon's socket was told, whatever the file says
    finally:
        try:
            os.kill(daemon, 15)  # the stand-in, which finds its daemon by that file, was not reached
        except ProcessLookupError:
            pass


def test_a_daemon_whose_pid_file_and_socket_the_user_moved_still_ends_after_their_last_task(tmp_path) -> None:
    """A task of the user can rewrite the pid file and move the daemon's socket (the pipe
    directory is theirs): root's ``quit`` then reaches nothing, and the daemon, found by
    what root started it with (the user's uid, its two directories), still ends."""
    root = tmp_path / "mps"
    plan = _plan(root)
    assert mps.acquire(plan, os.getpid()) == []
    pipe = Path(mps.pipe_dir(plan))
    daemon = int((pipe / mps.PID_FILE).read_text())
    try:
        (pipe / mps.PID_FILE).write_text(f"{2 ** 22 + 1}\n")
        (pipe / "control").rename(pipe / "moved")
        mps.release(plan)
        for _ in range(100):
            if not mps._running(daemon):
                break
            time.sleep(0.05)
        assert not mps._running(daemon), "the user's daemon outlived their last task"
    finally:
        try:
            os.kill(daemon, 9)
        except ProcessLookupError:
            pass
