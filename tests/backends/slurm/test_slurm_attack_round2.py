"""Second attack round on the Slurm backend with per-user accounts (issue 29, "attack2"), as
a hostile Trainyard user: what changed since the first round (the node-side account made
by ``task-start.py``, the environment check before a container task, the binds a Slurm
container gets, the image reference check). A strict xfail is a finding that holds today,
with its severity and fix in the reason; a plain test is an attack that fails today, kept
as a regression test. None needs the Slurm cluster: each attacks the piece that decides."""

from __future__ import annotations

import grp
import json
import os
import pwd
import signal
import subprocess
import time
import types
from pathlib import Path

import pytest
from podman_support import needs_podman

from trainyard.backends.base import Mount, PythonEnvironment, TaskKey, TaskLaunch
from trainyard.backends.containers import ContainerEngine, ContainerError, ContainerTask, environment_check
from trainyard.backends.slurm import submission, taskstart
from trainyard.backends.taskaccounts import ACCOUNT_MARKER, NO_HOME
from trainyard.backends.taskuser import TaskUser
from trainyard.core.clock import FakeClock
from trainyard.scheduler.snapshot import NodeState
from trainyard.services import admin, auth
from trainyard.services import environments as env_service
from trainyard.services import jobs as job_service
from trainyard.services import storages as storage_service
from trainyard.services.errors import Invalid
from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

# --- task-start.py: the account made on the node -------------------------------------------


class FakeNode:
    """A node's account database as ``task-start.py`` sees it (``pwd``), and the commands it
    runs as root (``subprocess.run``): each is recorded, and ``useradd`` "adds" the account."""

    def __init__(self, useradd_fails_with: tuple[int, str] | None = None) -> None:
        self.accounts: dict[str, pwd.struct_passwd] = {}
        self.commands: list[list[str]] = []
        self.useradd_fails_with = useradd_fails_with
        self.pwd = types.SimpleNamespace(getpwnam=self.getpwnam, struct_passwd=pwd.struct_passwd)
        self.subprocess = types.SimpleNamespace(run=self.run)

    def getpwnam(self, name: str) -> pwd.struct_passwd:
        try:
            return self.accounts[name]
        except KeyError:
            raise KeyError(f"getpwnam(): name not found: {name!r}") from None

    def add(self, name: str, uid: int, gid: int) -> None:
        self.accounts[name] = pwd.struct_passwd((name, "x", uid, gid, ACCOUNT_MARKER, NO_HOME, "/usr/sbin/nologin"))

    def run(self, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        self.commands.append(list(argv))
        if argv[0] == "useradd":
            uid, gid = int(argv[argv.index("--uid") + 1]), int(argv[argv.index("--gid") + 1])
            self.add(argv[-1], uid, gid)  # made: by this call, or by a concurrent one
            if self.useradd_fails_with is not None:
                code, text = self.useradd_fails_with
                return subprocess.CompletedProcess(argv, code, "", text)
        return subprocess.CompletedProcess(argv, 0, "", "")


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = FakeNode()
    monkeypatch.setattr(taskstart, "pwd", fake.pwd)
    monkeypatch.setattr(taskstart, "subprocess", fake.subprocess)
    monkeypatch.setenv("SLURMD_NODENAME", "n9")
    return fake


def _made(name: str, uid: int, gid: int) -> dict[str, object]:
    """``sandbox.json``'s ``account`` for an account Trainyard made on the server."""
    return {"name": name, "uid": uid, "gid": gid, "made": True, "marker": ACCOUNT_MARKER, "home": NO_HOME}


def _foreign_group() -> grp.struct_group:
    """A system group of this machine that is no Trainyard account's (munge, slurm, ...)."""
    return next(g for g in sorted(grp.getgrall(), key=lambda g: -g.gr_gid)
                if 100 <= g.gr_gid < 1000 and not g.gr_name.startswith(("ty-", "ty_")))


# FINDING T1: fixed (the test below is its regression test).
def test_a_trainyard_account_made_on_a_node_never_joins_a_group_the_node_already_has(node: FakeNode) -> None:
    taken = _foreign_group()
    with pytest.raises(taskstart.NodeFault):
        taskstart.ensure_account(_made("ty-mallory", 64999, taken.gr_gid))
    assert not any(c[0] == "useradd" for c in node.commands), node.commands


# FINDING T2: fixed (the test below is its regression test).
def test_an_account_a_concurrent_task_start_made_meanwhile_is_no_platform_fault(monkeypatch, node: FakeNode) -> None:
    node.useradd_fails_with = (9, "useradd: user 'ty-carol' already exists")
    gid = max(g.gr_gid for g in grp.getgrall() if g.gr_gid < 60000) + 1  # free here: groupadd runs
    taskstart.ensure_account(_made("ty-carol", 64998, gid))


def test_a_site_account_missing_on_a_node_is_a_fault_and_never_made(node: FakeNode) -> None:
    """Regression: only an account with Trainyard's marker on the server is made on a node;
    a site's (task_account_map) that is missing, or numbered otherwise, is the node's fault."""
    site = {"name": "alice", "uid": 64997, "gid": 64997, "made": False, "marker": ACCOUNT_MARKER, "home": "/home/a"}
    with pytest.raises(taskstart.NodeFault, match="no OS account 'alice' on node n9"):
        taskstart.ensure_account(site)
    node.add("alice", 64997, 100)
    with pytest.raises(taskstart.NodeFault, match="gid 100 on node n9"):
        taskstart.ensure_account(site)
    assert node.commands == []


# --- the environment check before a container task -------------------------------------------


def _user_environment(tmp_path: Path, python: str) -> PythonEnvironment:
    """A user's own environment (``yard env create`` builds it in their folder, which their
    tasks may write): its ``bin/python`` is whatever they put there, here a shell script
    (a .pth file in its site-packages runs as well under the real python)."""
    prefix = tmp_path / "environments" / "mallory" / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("#!/bin/sh\n" + python)
    (prefix / "bin" / "python").chmod(0o755)
    return PythonEnvironment(prefix=str(prefix), bin_dirs=(str(prefix / "bin"),))


def _check_argv(environment: PythonEnvironment, image: str) -> list[str]:
    """The check the Slurm backend writes as ``container.check`` for a task of mallory's
    account (``submission.write_task_files``); its runner runs it as root before the task.
    ``guarded=False`` only because tmp_path lies under /tmp (``unswappable`` refuses a bind
    from there); the options in question are the same."""
    engine = ContainerEngine.find("podman", "runc")
    assert engine is not None
    task = ContainerTask(key=TaskKey(1, 0, "main", 0), image=image, node="n1", work_dir=Path("/"),
                         script=Path("/dev/null"), env_file=Path("/dev/null"), user=(64990, 64990, ()))
    check = environment_check(engine, task, environment, guarded=False)
    assert check is not None
    return list(check["argv"])


@needs_podman
# FINDING C3: fixed (the test below is its regression test).
def test_a_setuid_program_in_the_image_gives_no_root_in_the_environment_check(suid_image: str, tmp_path: Path) -> None:
    environment = _user_environment(tmp_path, "echo EUID=$(rootsh -p -c 'id -u')\n"
                                    "grep -E '^(NoNewPrivs|CapBnd)' /proc/self/status\n")
    done = subprocess.run(_check_argv(environment, suid_image), capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert "EUID=" in out, out
    assert "EUID=0" not in out and "NoNewPrivs:\t1" in out, out


@needs_podman
@pytest.mark.xfail(strict=True, reason=(
    "FINDING C4 (low now: bounded to 120 s, 64 pids, 512 MB, 1 CPU by the engine): the environment check "
    "container is podman's (conmon's child, cgroup libpod_parent), not the Slurm step's: when Slurm kills the "
    "step (scancel, time limit) the podman client dies and the container goes on until that bound. Fix: "
    "run the check under the task's limits (the parent cgroup run_container makes), with a "
    "name the runner removes on exit (trap) and a timeout; or run it as the task's own first command"))
def test_the_environment_check_ends_when_its_step_is_killed(suid_image: str, tmp_path: Path) -> None:
    environment = _user_environment(tmp_path, "trap '' TERM INT HUP\necho started\nexec sleep 300\n")
    client = subprocess.Popen(_check_argv(environment, suid_image), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)

    def running() -> list[str]:
        listed = subprocess.run(["podman", "ps", "--filter", f"ancestor={suid_image}", "--format", "{{.ID}}"],
                                capture_output=True, text=True, check=False, timeout=60)
        return listed.stdout.split()

    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "started"
        # Slurm ends a step: SIGTERM to its processes (podman proxies it), then SIGKILL.
        client.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # KillWait, scaled down: the signal reaches the container or not
        client.kill()
        client.wait(timeout=30)
        left = running()
        assert left == [], f"the check's container outlived its killed step: {left}"
    finally:
        client.kill()
        for container in running():
            subprocess.run(["podman", "rm", "--force", "--time", "0", container], capture_output=True, check=False)


# --- the binds of a Slurm container -----------------------------------------------------------


# FINDING S2: fixed (the test below is its regression test).
def test_a_slurm_container_is_never_given_a_storage_subpath_the_user_can_swap(tmp_path: Path) -> None:
    engine = ContainerEngine("podman", "/usr/bin/podman", "runc")
    storage = tmp_path / "home" / "mallory"
    (storage / "sub").mkdir(parents=True)
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    me = pwd.getpwuid(os.getuid())
    account = submission.TaskAccount(
        user=TaskUser(me.pw_name, me.pw_uid, me.pw_gid, NO_HOME), work=attempt / "t.work",
        script=attempt / "t.sh", secrets=attempt / "t.secrets", suspend_dir=attempt / "t.suspend")
    for folder in (account.work, account.secrets, account.suspend_dir):
        folder.mkdir()
    task = TaskLaunch(key=TaskKey(1, 0, "main", 0), node="n1", script="true", env={}, image="python:3.12",
                      user="mallory", mounts=(Mount(str(storage / "sub"), "/mnt/data", root=str(storage)),))
    with pytest.raises(ContainerError, match="subPath"):
        submission.write_task_files(attempt / "t", task, {}, tmp_path / "jobdir", tmp_path / "py", engine,
                                    account=account)
    written = attempt / "t" / "container.argv"
    assert not written.exists() or f"{storage / 'sub'}:/mnt/data".encode() not in written.read_bytes().split(b"\0")


# FINDING S2: fixed (the test below is its regression test).
def test_a_subpath_in_a_job_whose_environment_is_an_image_is_refused_at_submit(db: Database) -> None:
    clock = FakeClock()
    with db.session() as s:
        root = auth.create_user(s, "root", is_admin=True, clock=clock)
        mallory = auth.create_user(s, "mallory", is_admin=False, clock=clock)
        admin.create_group(s, "cv", clock=clock)
        admin.add_member(s, "cv", "mallory")
        storage_service.create_storage(s, "data", "/srv/data/", read_only=False, kind="nfs", description="",
                                       clock=clock)
        storage_service.grant_storage(s, "data", "@cv", read_only=False)
        env_service.create_base(s, root, "torch-image", path=None, image="python:3.12", group=None, clock=clock)
    text = ("name: j\nenvironment: torch-image\nstorages: [{name: data, subPath: mallory/x, mountPath: /mnt/x}]\n"
            "taskRoles:\n  w:\n    commands: [run]\n")
    with pytest.raises(Invalid, match="subPath"), db.session() as s:
        job_service.submit_job(s, s.get(UserRow, mallory.id), parse_job(text), clock=clock,
                               nodes=[NodeState("n1", cpu_milli=8000, memory_mb=16384)])


# --- the job's image reference ------------------------------------------------------------------


@pytest.mark.parametrize("reference", [
    "DOCKER-ARCHIVE:/etc/shadow", "Oci-Archive:/root/x.tar", " docker-archive:/etc/shadow",
    "docker-archive:/etc/shadow ", "docker-archive:/etc/shadow\n", "-v/etc:/x", "--privileged",
    "python:3.12 --privileged", "tarball:/etc/shadow", "Containers-Storage:x", "docker-daemon:x:1",
])
def test_image_reference_bypasses_are_refused_at_submit(reference: str) -> None:
    """Regression: case, whitespace, a newline or an option in front of a local transport."""
    with pytest.raises(SpecError, match="image"):
        parse_job(f"name: x\nimage: {json.dumps(reference)}\ntaskRoles: {{main: {{commands: ['true']}}}}\n")
