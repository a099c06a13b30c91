"""Per-user accounts on Slurm (issue 29): each user's tasks run as their own OS account on
the node, in the local backend's bubblewrap sandbox; secrets are files only that account
reads; job directories are the owner's; a user without an account is refused at submit."""

from __future__ import annotations

import io
import os
import pwd
import stat

import pytest

from slurm.cluster import drive, submit
from trainyard.backends import filewalk
from trainyard.backends.base import TaskKey
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.slurm.backend import SlurmBackend
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.client_workdir import pack
from trainyard.core.clock import SystemClock
from trainyard.services import workdirs
from trainyard.store.rows import JobRow


def test_a_task_runs_as_its_owner_s_account_in_the_sandbox_with_its_secret_as_a_file(accounts_world) -> None:
    world = accounts_world
    state = world.backend.state_dir
    job_id = submit(world, f"""
name: mine
secrets: {{token: s3cret}}
taskRoles:
  main:
    commands:
      - id -un
      - cat "$TRAINYARD_SECRETS_DIR/token"; echo
      - echo saved > "$TRAINYARD_JOB_DIR/kept"
      - echo result > result.txt; ln -s /etc/shadow shadow
      - echo "pwd $PWD"
      - ls {state} 2>&1 | head -3; echo "state listed $(ls -A {state} 2>/dev/null | wc -l)"
      - echo "procs $(ls /proc | grep -c '^[0-9]')"
""")
    job = drive(world, job_id)
    key = TaskKey(job_id, 0, "main", 0)
    out = world.backend.read_log(key).data.decode()
    assert job.state == "SUCCEEDED", out
    lines = out.splitlines()
    assert lines[0] == "ty-alice" and lines[1] == "s3cret", out
    task_dir = world.backend.task_dir(key)
    work = task_dir.with_name(task_dir.name + ".work")
    assert f"pwd {work}" in out
    assert "state listed 0" in out  # the state dir is an empty tmpfs in the sandbox
    uid = pwd.getpwnam("ty-alice").pw_uid
    secret = task_dir.with_name(task_dir.name + ".secrets") / "token"
    assert (stat.S_IMODE(secret.stat().st_mode), secret.stat().st_uid) == (0o400, uid)
    job_dir = world.backend.job_dir(job_id)
    assert (stat.S_IMODE(job_dir.stat().st_mode), job_dir.stat().st_uid) == (0o700, uid)
    assert (stat.S_IMODE(task_dir.stat().st_mode), task_dir.stat().st_uid) == (0o700, 0)
    assert (job_dir / "kept").read_text() == "saved\n"
    # Its owner's results, read by the server (root) on the shared directory: the account's
    # folders, never through the link it made (yard ls/cp, services/job_files).
    assert world.backend.work_dir(key) == work
    kept = filewalk.open_file(job_dir, ["kept"])
    assert b"".join(kept.chunks(0, kept.size)) == b"saved\n"
    listed = {e.name: e for e in filewalk.list_dir(work, []).entries}
    assert listed["result.txt"].size == 7 and listed["shadow"].kind == "link"
    with pytest.raises(filewalk.Refused):
        filewalk.open_file(work, ["shadow"])


def test_a_job_sent_with_its_folder_starts_in_a_copy_of_it_on_the_node_as_its_owner(accounts_world,
                                                                                      tmp_path) -> None:
    world = accounts_world
    project = tmp_path / "project"
    for name, text in {"train.py": "import pkg.deep.mod as m\nprint('ran', m.N, open('data/x.csv').read().strip())\n",
                       "pkg/__init__.py": "", "pkg/deep/__init__.py": "", "pkg/deep/mod.py": "N = 7\n",
                       "data/x.csv": "a,b\n", "big.ckpt": "left behind\n", ".yardignore": "*.ckpt\n"}.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    with world.db.session() as s:
        sent = workdirs.receive(s, s.merge(world.user), io.BytesIO(pack(project, max_bytes=1 << 20).gzipped()),
                                world.controller.workdirs, SystemClock())
    job_id = submit(world, f"name: own\nworkdir: {sent.digest}\ntaskRoles:\n  main:\n    commands:\n"
                           "      - python3 train.py\n      - test ! -e big.ckpt && stat -c '%U %a' pkg/deep/mod.py\n")
    job = drive(world, job_id)
    key = TaskKey(job_id, 0, "main", 0)
    out = world.backend.read_log(key).data.decode()
    assert job.state == "SUCCEEDED", out
    assert out.splitlines()[-2:] == ["ran 7 a,b", "ty-alice 644"], out
    task_dir = world.backend.task_dir(key)
    archive = task_dir.with_name(task_dir.name + ".suspend") / "workdir.tar.gz"
    info = archive.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o400, pwd.getpwnam("ty-alice").pw_uid)


def test_a_user_without_an_account_is_refused_at_submit_with_the_fix(tmp_path) -> None:
    """Not a failed job: the submit (and a dry run, and a clone) answers 403 naming the user."""
    if os.geteuid() != 0:
        pytest.skip("per-user accounts need root")
    from types import SimpleNamespace

    from trainyard.backends.slurm.backend import SlurmBackend
    from trainyard.services.errors import Forbidden
    from trainyard.services.submission import check_task_account

    sandbox, why = find_sandbox("bwrap", as_root=True)
    assert sandbox is not None, why
    backend = SlurmBackend(tmp_path / "slurm", accounts=TaskAccounts({}, create=False), sandbox=sandbox)
    user = SimpleNamespace(name="nobody-mapped-here")
    with pytest.raises(Forbidden) as refused:
        check_task_account(SimpleNamespace(backend=backend), user)  # type: ignore[arg-type]
    assert "nobody-mapped-here" in str(refused.value) and "task_account_map" in str(refused.value)
    assert refused.value.status == 403


def test_tasks_cannot_reach_munge_and_pyxis_is_refused_with_accounts(tmp_path) -> None:
    # Through munged's socket a task could have Slurm run jobs as its account, outside the
    # sandbox: its folder is hidden. Pyxis would run the user's image as root over the whole
    # state dir: refused with accounts.
    if os.geteuid() != 0:
        pytest.skip("per-user accounts need root")
    sandbox, why = find_sandbox("bwrap", as_root=True)
    assert sandbox is not None, why
    munge_dir = tmp_path / "run" / "munge"
    munge_dir.mkdir(parents=True)
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=x\nAuthType=auth/munge\nAuthInfo=socket={munge_dir}/munge.socket.2\n")
    backend = SlurmBackend(tmp_path / "state", commands=SlurmCommands(str(conf)), accounts=TaskAccounts(),
                           sandbox=sandbox)
    assert munge_dir in backend._sandbox.hidden and backend.state_dir in backend._sandbox.hidden
    with pytest.raises(ValueError, match="slurm_pyxis cannot run tasks as their owners' accounts"):
        SlurmBackend(tmp_path / "state2", commands=SlurmCommands(str(conf)), accounts=TaskAccounts(),
                     sandbox=sandbox, pyxis=True)


def _free_id(taken) -> int:
    return next(i for i in range(64000, 65000) if i not in taken)


def test_a_node_makes_the_account_trainyard_made_with_the_servers_ids_and_faults_on_a_site_account_it_lacks() -> None:
    # task-start.py on each node (root): what the server made there with useradd, a node
    # makes with the same uid and gid; anything else missing or numbered otherwise is the
    # node's fault (retried elsewhere), not the task's.
    if os.geteuid() != 0:
        pytest.skip("making accounts needs root")
    import grp
    import subprocess

    from trainyard.backends.slurm import taskstart
    from trainyard.backends.taskaccounts import ACCOUNT_MARKER, NO_HOME

    name = "ty-zz-node-made"
    uid = _free_id({e.pw_uid for e in pwd.getpwall()})
    gid = _free_id({g.gr_gid for g in grp.getgrall()})
    made = {"name": name, "uid": uid, "gid": gid, "made": True, "marker": ACCOUNT_MARKER, "home": NO_HOME}
    try:
        taskstart.ensure_account(made)
        entry = pwd.getpwnam(name)
        assert (entry.pw_uid, entry.pw_gid, entry.pw_gecos) == (uid, gid, ACCOUNT_MARKER)
        taskstart.ensure_account(made)  # there already, with the same ids: nothing to do
        with pytest.raises(taskstart.NodeFault, match=f"is uid {uid} gid {gid} on node .*, but {uid + 1} {gid}"):
            taskstart.ensure_account({**made, "uid": uid + 1})
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)
    with pytest.raises(taskstart.NodeFault, match="no OS account 'ty-zz-site-only' on node .* useradd --uid"):
        taskstart.ensure_account({**made, "name": "ty-zz-site-only", "made": False})
    with pytest.raises(KeyError):
        pwd.getpwnam("ty-zz-site-only")


def test_elastic_workers_sharing_a_node_in_the_sandbox_name_themselves_apart_and_resolve_each_other(
        accounts_world) -> None:
    """torchrun tells its agents apart by (address, process id), and each is pid 2 in its
    sandbox: two workers at one node's address would be one agent to it, and the rendezvous
    would never fill (a new user's trial, on the local backend). Each gets a host name of its
    own (``wiring.agent_names``), in every worker's /etc/hosts, resolving to its node."""
    world = accounts_world
    hog = submit(world, "name: hog\ntaskRoles:\n  h:\n    instances: 3\n    resourcePerInstance: {gpu: 4}\n"
                        "    commands: ['sleep 600']\n")
    drive(world, hog, ("RUNNING",))
    job_id = submit(world, """
name: el
taskRoles:
  worker:
    instances: {min: 2, max: 2}
    resourcePerInstance: {gpu: 1}
    commands:
      - echo "pid $$"
      - getent hosts trainyard-worker-0 trainyard-worker-1
      - echo "flags $TRAINYARD_TORCHRUN"
""")
    job = drive(world, job_id)
    outs = [world.backend.read_log(TaskKey(job_id, 0, "worker", i)).data.decode() for i in (0, 1)]
    assert job.state == "SUCCEEDED", outs
    with world.db.session() as s:
        nodes = {t.node for t in s.get(JobRow, job_id).attempts[0].tasks}
    assert len(nodes) == 1, nodes  # both on the node the hog left free
    for index, out in enumerate(outs):
        resolved = {line.split()[1]: line.split()[0] for line in out.splitlines() if "trainyard-worker-" in line
                    and not line.startswith("flags")}
        assert set(resolved) == {"trainyard-worker-0", "trainyard-worker-1"}, out
        assert len(set(resolved.values())) == 1, out  # both the node's address
        assert f"--local-addr=trainyard-worker-{index}" in out, out
