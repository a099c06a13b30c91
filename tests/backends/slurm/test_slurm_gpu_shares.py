"""Enforced GPU shares on Slurm (issue 36): one MPS daemon per user per device on each node,
started and quit by the task runner as root (``slurm/mpsstep``), on the dev cluster against
the MPS stand-in (``tests/standins/mps.py``)."""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.server import wait_until
from standins.mps import CLIENT, CONTROL, SMI, records

from slurm.conftest import World, make_world, per_user
from trainyard.backends import mps
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.slurm import mpsstep, shares, taskstart
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.backends.slurm.taskrecords import exit_status
from trainyard.services.jobs import backend_warnings
from trainyard.spec.models import JobSpec

H100_MIB = 81559  # the stand-in nvidia-smi's
QUARTER_MIB = H100_MIB * 250 // 1000
GPU, UUID = 3, "GPU-fake-0003"  # n1's last device: the scheduler's own tests fill the first ones


@pytest.fixture
def shares_world(slurm: SlurmCommands, tmp_path: Path, outside_tmp: Path, _sqlite_template: Path) -> Iterator[World]:
    """``accounts_world`` whose nodes have the MPS stand-in (in a folder every account reaches),
    its daemons' folders under ``outside_tmp/mps``, compute shares on."""
    stand_in = outside_tmp / "mps-bin"
    stand_in.mkdir(mode=0o755)
    for program in (CONTROL, SMI, CLIENT):
        shutil.copy(program, stand_in / program.name)
        (stand_in / program.name).chmod(0o755)
    yield from make_world(slurm, tmp_path, _sqlite_template, gpu_shares=("auto", True),
                          mps_control=str(stand_in / CONTROL.name), mps_root=outside_tmp / "mps", **per_user())


def _launch(world: World, job_id: int, user: str, milli: int, script: str, alloc: int = 0) -> TaskKey:
    key = TaskKey(job_id, 0, "main", 0)
    other = "bob" if user == "alice" else "alice"
    device = Path(world.backend.mps_root) / "n1" / f"gpu{GPU}"
    other_pipe = device / f"{pwd.getpwnam(f'ty-{other}').pw_uid}-{other}" / "pipe"
    world.backend.launch(TaskLaunch(key, "n1", script, {"ALLOC": str(alloc), "OTHER": str(other_pipe)}, cpu_milli=1000,
                                    memory_mb=64, gpus=(GPU,), gpu_milli=(milli,), user=user))
    return key


def _log(world: World, key: TaskKey) -> str:
    return world.backend.read_log(key).data.decode(errors="replace")


def _ended(world: World, key: TaskKey):
    return wait_until(lambda: (s := world.backend.observe([key])[key]).running is False and s, timeout=40,
                      what=f"task {key} to end")


def test_where_slurm_cannot_hold_a_share_the_start_and_every_fractional_job_say_so() -> None:
    off, bare, on = shares.share_note("off", True), shares.share_note("auto", False), shares.share_note("auto", True)
    assert "gpu_share_enforcement: off" in off and "without per-user task accounts" in bare and on == ""
    job = JobSpec.model_validate({"name": "j", "taskRoles": {"main": {
        "resourcePerInstance": {"gpu": 0.5}, "commands": ["true"]}}})
    assert backend_warnings(job, "slurm", bare) == [bare] and backend_warnings(job, "slurm", on) == []
    in_image = JobSpec.model_validate({"name": "j", "taskRoles": {"main": {
        "resourcePerInstance": {"gpu": 0.5}, "commands": ["true"], "image": "ubuntu:22.04"}}})
    assert "not enforced in a container" in backend_warnings(in_image, "slurm", on)[0]
    assert "enforced by NVIDIA MPS" in shares.summary(on, "/run/trainyard-mps/x", True)
    assert shares.summary(bare, "/run/trainyard-mps/x", True) == bare


def test_each_users_shares_on_a_node_hold_one_daemon_of_theirs_and_each_task_its_share(shares_world) -> None:
    """Two users' shared tasks on one device of a node: a daemon each, as their account, of
    that device alone, outside the steps; the task past its share fails alone. Alice's ends
    are released (her daemon quit after her last); Bob's task runner is SIGKILLed (a step's
    cleanup, the OOM killer), so nobody releases his daemon: its keeper quits it."""
    world = shares_world
    public = Path(world.backend.mps_root).parent
    device = Path(world.backend.mps_root) / "n1" / f"gpu{GPU}"
    gate = public / "gate"
    client = public / "mps-bin" / CLIENT.name
    # Each task reports what it got, then waits (all three run at once) until the test opens the gate.
    script = (f"{client} {H100_MIB} $ALLOC; echo rc=$?; echo left > $CUDA_MPS_PIPE_DIRECTORY/left\n"
              "[ -e $OTHER ] && echo reached-other-pipe\n"
              f"while [ ! -e {gate} ]; do sleep 0.05; done\n")
    # Their accounts now: each task names the other user's pipe.
    uid = {user: world.backend.accounts.account_for(user).uid for user in ("alice", "bob")}
    quarter = _launch(world, 1, "alice", 250, script, QUARTER_MIB + 1)  # one MiB past its share: CUDA's OOM
    half = _launch(world, 2, "alice", 500, script, QUARTER_MIB + 1)  # within its share, on the same device
    bob = _launch(world, 3, "bob", 250, script + "echo holding; sleep 600\n", 100)
    try:
        for key in (quarter, half, bob):
            wait_until(lambda key=key: "rc=" in _log(world, key), timeout=40, what=f"task {key} to report")
    finally:
        gate.touch()
    for key in (quarter, half):
        assert _ended(world, key).exit_code == 0, _log(world, key)
    wait_until(lambda: "holding" in _log(world, bob), timeout=20, what="bob's task to hold on")

    for key, user, mib, threads in ((quarter, "alice", QUARTER_MIB, "25"), (half, "alice", H100_MIB // 2, "50"),
                                    (bob, "bob", QUARTER_MIB, "25")):
        got = json.loads(next(line for line in _log(world, key).splitlines() if line.startswith("{")))
        # Its own limit, its device by UUID; a client of its owner's daemon of that device alone.
        assert (got["memory"], got["threads"], got["visible"]) == (f"{UUID}={mib}M", threads, UUID)
        assert got["pipe"] == str(device / f"{uid[user]}-{user}" / "pipe") and got["uid"] == uid[user]
        assert got["daemon"] == {"owner": uid[user], "control": True}  # bound into its sandbox
        assert "reached-other-pipe" not in _log(world, key)  # its sandbox shows its own pipe directory, no other
    assert "CUDA error: out of memory" in _log(world, quarter) and "rc=2" in _log(world, quarter)
    assert "allocated" in _log(world, half) and "rc=0" in _log(world, half)
    assert "rc=0" in _log(world, bob)

    folders = {user: device / f"{uid[user]}-{user}" for user in uid}
    bobs = int((folders["bob"] / "pipe" / mps.PID_FILE).read_text())
    [holder] = [json.loads(path.read_text()) for path in (folders["bob"] / "holders").iterdir()]
    os.kill(holder["pid"], signal.SIGKILL)  # bob's task runner: it never gets to release his daemon
    wait_until(lambda: not mps._running(bobs), timeout=30, what="the daemon of the killed step to end")

    told = records(device)
    starts = [r for r in told if r["event"] == "start"]
    assert sorted(r["uid"] for r in starts) == sorted(uid.values())  # once per user, as that user
    for daemon in (r for r in told if r["event"] == "daemon"):
        assert daemon["environ"]["CUDA_VISIBLE_DEVICES"] == UUID  # its one device
        assert "job_" not in daemon["cgroups"], daemon["cgroups"]  # outside the step that started it
    alice = [c for r in told if r["uid"] == uid["alice"] and r["event"] == "commands" for c in r["commands"]]
    # The daemon holds alice to what she holds on the device in all, while both her shares run.
    assert f"set_default_device_pinned_mem_limit 0 {QUARTER_MIB + H100_MIB // 2}M" in alice
    assert "set_default_active_thread_percentage 75" in alice
    # Quit after each user's last task there (bob's by his keeper): once, reaching a live
    # daemon; then no daemon, no keeper.
    for user, folder in folders.items():
        quits = [r for r in told if r["uid"] == uid[user] and r["event"] == "commands" and "quit" in r["commands"]]
        assert [r["daemon"] is not None for r in quits] == [True], quits
        wait_until(lambda folder=folder: not (folder / mpsstep.KEEPER).exists(), timeout=20,
                   what=f"{user}'s keeper to end")
        assert list((folder / "pipe").iterdir()) == []  # nothing their tasks left there stays on the node


def test_a_node_that_cannot_hold_a_share_says_why_and_the_task_runs_unenforced(tmp_path, monkeypatch) -> None:
    """The node step's own refusals (no MPS there, a step given another device than the
    plan's), in this process: its pipe directory is still made for the sandbox to bind (on a
    node where nothing of the MPS root exists yet too: the sandbox could not start without it), no
    client variables are handed on, and the task's status says why."""
    task_dir = tmp_path / "main-0-0"
    task_dir.mkdir()
    (tmp_path / "run").mkdir()
    base = tmp_path / "run" / "trainyard-mps" / "0123abcd"  # as on a node just booted: not even its parent yet
    plan = {"node": "n1", "gpu": 0, "milli": 250, "base": str(base), "root": str(base / "n1" / "gpu0"),
            "control": str(tmp_path / "absent" / CONTROL.name), "key": f"{os.geteuid()}-alice", "uid": os.geteuid(),
            "gid": os.getegid(), "groups": [], "holder": "1-0-main-0-0", "threads": None}
    (task_dir / mpsstep.PLAN).write_text(json.dumps(plan))
    monkeypatch.syspath_prepend(str(Path(mps.__file__).parent))  # the node's copy of mps.py, beside the step
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    for step_gpus, why in (("0", "nvidia-cuda-mps-control is not installed on this node"),
                           ("1", "its step holds GPU 1, not GPU 0 that its share is of")):
        monkeypatch.setenv("SLURM_STEP_GPUS", step_gpus)
        umask = os.umask(0o077)  # Slurm's step has the submitter's
        try:
            assert mpsstep.acquire(str(task_dir), os.getpid()) == 0
        finally:
            os.umask(umask)
        for folder in (base.parent, base, base / "n1"):  # every user's daemon passes through them
            assert stat.S_IMODE(folder.stat().st_mode) == mps.ROOT_MODE, folder
        assert (task_dir / mpsstep.NOTE).read_text().strip().endswith(why)
        assert not (task_dir / mpsstep.ENV).exists() and (base / "n1" / "gpu0" / plan["key"] / "pipe").is_dir()
    assert mpsstep.release(str(task_dir), os.getpid()) == 0  # nothing was held
    # task-start.py makes the root on a node where no shared task ran yet (the sandbox hides it): as passable.
    fresh = tmp_path / "run2" / "trainyard-mps" / "0123abcd"
    umask = os.umask(0o077)
    try:
        taskstart.make_node_dir(str(fresh))
    finally:
        os.umask(umask)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (fresh.parent.parent, fresh.parent, fresh)] == [0o711] * 3
    (task_dir / "exit").write_text("0\n")
    status = exit_status(TaskKey(1, 0, "main", 0), task_dir)
    assert status is not None and status.exit_code == 0 and mps.NOT_ENFORCED in status.message
    # A plan for another node is refused outright (the runner says so; the task runs unenforced).
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    with pytest.raises(ValueError, match="is for node n1, and this is node n2"):
        mpsstep.acquire(str(task_dir), os.getpid())


def test_what_a_task_leaves_in_its_pipe_directory_never_meets_the_next_daemon_nor_outlives_the_last(tmp_path) -> None:
    """The pipe directory is the user's, bound writable into their shared tasks, and kept on
    the node's ``/run`` between them; the daemon, their account *outside* the sandbox, works
    in it. A link a task planted there (after quitting its own daemon, which it may) must not
    send the next daemon's writes to a file the sandbox hides from the user; and what a task
    left there (as much as its step's memory, in a tmpfs every user's daemons and the node's
    services share) is gone once the user's last task there has ended. In this process: the
    node step's ``backends/mps`` with a plan as ``mps-step.py`` makes it, the stand-in daemon."""
    hidden = tmp_path / "hidden"  # what the sandbox hides and the account may write
    hidden.write_text("precious\n")
    root = tmp_path / "mps" / "n1" / "gpu0"
    plan = {"root": str(root), "control": str(CONTROL), "key": f"{os.geteuid()}-alice", "uid": os.geteuid(),
            "gid": os.getegid(), "groups": [], "holder": "1-0-main-0-0", "threads": None,
            "clients": [["GPU-fake-0000", 100]], "devices": [[0, 100]], "visible": "GPU-fake-0000"}
    for folder in (root.parent.parent, root.parent):
        mps.make_root(str(folder))
    mps.prepare(plan)
    pipe = Path(mps.pipe_dir(plan))
    for name in ("control", mps.PID_FILE + ".tmp", "control_lock", "log"):  # what a daemon may write there
        (pipe / name).symlink_to(hidden)
    (pipe / "out").symlink_to(tmp_path)  # removed, never followed
    os.mkfifo(pipe / "fifo")
    deep = pipe.joinpath(*["d"] * 200)  # deeper than a recursive removal goes
    deep.mkdir(parents=True)
    (deep / "blob").write_bytes(b"x" * 4096)
    (pipe / "shut").mkdir()
    (pipe / "shut" / "blob").write_bytes(b"x")
    (pipe / "shut").chmod(0)
    assert mps.acquire(plan, os.getpid()) == []
    daemon = int((pipe / mps.PID_FILE).read_text())
    try:
        assert hidden.read_text() == "precious\n"  # the daemon met nothing the task had left
        assert sorted(p.name for p in pipe.iterdir()) == ["control", mps.PID_FILE]
        (pipe / "left").write_bytes(b"x" * 4096)  # what the task leaves behind
        assert mps.release(plan) == []
        assert list(pipe.iterdir()) == [] and not mps._running(daemon)
        assert hidden.read_text() == "precious\n" and (tmp_path / "mps").is_dir()
    finally:
        if mps._running(daemon):
            os.kill(daemon, signal.SIGKILL)


def test_the_daemons_logs_stay_within_their_cap(tmp_path, monkeypatch) -> None:
    """The daemon, the user's account outside the step's memory limit, logs each command a
    task of the user's sends it (``control.log``; its servers a ``server.log`` each) on the
    node's ``/run``: a task looping commands would fill that tmpfs for every user. Root (the
    keeper, each round; the daemon's end) empties a log past the cap, through no link."""
    monkeypatch.setattr(mps, "LOG_CAP_BYTES", 4096)
    hidden = tmp_path / "hidden"
    hidden.write_bytes(b"x" * 8192)
    root = tmp_path / "mps" / "n1" / "gpu0"
    plan = {"root": str(root), "key": f"{os.geteuid()}-alice", "uid": os.geteuid(), "gid": os.getegid()}
    for folder in (root.parent.parent, root.parent):
        mps.make_root(str(folder))
    mps.prepare(plan)
    logs = Path(mps.log_dir(plan))
    (logs / "server-1").mkdir()
    for path in (logs / "control.log", logs / "server-1" / "server.log"):
        path.write_bytes(b"x" * 8192)  # what the daemon logged
    (logs / "small.log").write_bytes(b"x" * 100)
    (logs / "link.log").symlink_to(hidden)
    os.mkfifo(logs / "fifo")
    mps.cap_logs(plan)
    assert (logs / "control.log").stat().st_size == 0 and (logs / "server-1" / "server.log").stat().st_size == 0
    assert (logs / "small.log").stat().st_size == 100 and hidden.stat().st_size == 8192


@pytest.mark.skipif(os.geteuid() != 0, reason="one account for two users' daemons needs root")
def test_users_who_share_one_account_never_have_root_tell_each_others_daemon(outside_tmp, monkeypatch) -> None:
    """Two Trainyard users mapped to one account (task_account_map) get a daemon each, but both
    run as that one uid, outside every sandbox, and so do root's commands to them: a link
    alice's task puts in her pipe directory (where the control program finds its daemon) must
    not send root's ``quit`` after her last task, or her limits, to bob's daemon, which his
    running tasks need. (Her sandbox hides his folder; the control program's view must too.)"""
    # Her daemon, which root's quit no longer reaches through her link, ends by its uid and folders: soon.
    monkeypatch.setattr(mps, "_end_strays", functools.partial(mps._end_strays, wait_seconds=0.2))
    nobody = pwd.getpwnam("nobody")
    base = outside_tmp / "mps"
    root = base / "n1" / "gpu0"
    for folder in (base, root.parent):
        mps.make_root(str(folder))

    def plan(user: str, holder: str) -> dict:
        return {"root": str(root), "base": str(base), "control": str(CONTROL), "key": f"{nobody.pw_uid}-{user}",
                "uid": nobody.pw_uid, "gid": nobody.pw_gid, "groups": [], "holder": holder, "threads": None,
                "clients": [["GPU-fake-0000", 100]], "devices": [[0, 100]], "visible": "GPU-fake-0000"}

    alice, bob = plan("alice", "1-0-main-0-0"), plan("bob", "2-0-main-0-0")
    assert mps.acquire(bob, os.getpid()) == [] and mps.acquire(alice, os.getpid()) == []
    alices, bobs = Path(mps.pipe_dir(alice)), Path(mps.pipe_dir(bob))
    daemons = {user: int((pipe / mps.PID_FILE).read_text()) for user, pipe in (("alice", alices), ("bob", bobs))}
    try:
        for name in (mps.PID_FILE, "control"):  # what alice's task does in her pipe directory
            (alices / name).unlink()
            (alices / name).symlink_to(bobs / name)
        mps.release(alice)  # her last task there has ended
        assert mps._running(daemons["bob"]), "root quit bob's daemon on alice's word"
        # Hers ends all the same (its uid and its folders), and his after his own last task.
        wait_until(lambda: not mps._running(daemons["alice"]), timeout=10, what="alice's daemon to end")
        assert mps.release(bob) == []
        wait_until(lambda: not mps._running(daemons["bob"]), timeout=10, what="bob's daemon to end")
    finally:
        for pid in daemons.values():
            if mps._running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(os.geteuid() != 0, reason="a daemon as another account needs root")
def test_a_link_left_in_the_pipe_directory_is_never_followed_by_the_users_daemon(outside_tmp, monkeypatch) -> None:
    """The emptying before a daemon starts can be kept from happening (a process of the
    user's own that carries the daemon's two folders in its environment looks like the daemon
    to root) or raced (another of the user's tasks writing there meanwhile): the daemon, the
    user's account outside every sandbox, must still not write through a link there to a file
    the sandbox hides from the user (here one of the account's own)."""
    monkeypatch.setattr(mps, "_end_strays", functools.partial(mps._end_strays, wait_seconds=0.2))
    nobody = pwd.getpwnam("nobody")
    base = outside_tmp / "mps"
    root = base / "n1" / "gpu0"
    for folder in (base, root.parent):
        mps.make_root(str(folder))
    plan = {"root": str(root), "base": str(base), "control": str(CONTROL), "key": f"{nobody.pw_uid}-alice",
            "uid": nobody.pw_uid, "gid": nobody.pw_gid, "groups": [], "holder": "1-0-main-0-0", "threads": None,
            "clients": [["GPU-fake-0000", 100]], "devices": [[0, 100]], "visible": "GPU-fake-0000"}
    hidden = outside_tmp / "hidden"
    hidden.write_text("precious\n")
    os.chown(hidden, nobody.pw_uid, nobody.pw_gid)
    mps.prepare(plan)
    pipe = Path(mps.pipe_dir(plan))
    env = {mps.PIPE_VARIABLE: str(pipe), mps.LOG_VARIABLE: mps.log_dir(plan)}
    decoy = subprocess.Popen(["sleep", "60"], user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], env=env)
    try:
        wait_until(lambda: mps._daemon_processes(plan), timeout=10, what="the decoy to look like a daemon")
        for name in ("control", mps.PID_FILE + ".tmp"):  # where the (stand-in) daemon writes as it starts
            (pipe / name).symlink_to(hidden)
        mps.acquire(plan, os.getpid())
        assert hidden.read_text() == "precious\n"
    finally:
        decoy.kill()
        decoy.wait()
        mps.release(plan)
