"""The local backend's isolation attack (``e2e/test_isolation_e2e``), on the Slurm dev
cluster: `yard up --backend slurm` as root runs each user's tasks as their own account in
the sandbox on the nodes, and bob's job finds nothing of alice's on any route."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
from pathlib import Path

import pytest
from deadlines import scaled
from e2e.server import wait_until
from e2e.test_isolation_e2e import ALICE_JOB, ALICE_SECRET, BOB_JOB, BOB_SECRET, SNOOP

from trainyard.client import Client


def _mode(path: Path) -> tuple[str, int]:
    info = os.lstat(path)
    return oct(stat.S_IMODE(info.st_mode)), info.st_uid


def test_bob_finds_nothing_of_alice_on_any_route_on_slurm(slurm_server) -> None:
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("per-user accounts on Slurm need yard up as root and bubblewrap")
    srv = slurm_server
    assert "task isolation on Slurm: each Trainyard user's tasks run as their own OS account" in srv.log()
    admin = srv.admin()
    for name in ("alice", "bob"):
        admin.create_user(name)
    alice = Client(srv.url, admin.create_token(user="alice").token)
    bob = Client(srv.url, admin.create_token(user="bob").token)

    alice_job = alice.submit(ALICE_JOB).id
    wait_until(lambda: b"ready" in alice.logs(alice_job), timeout=scaled(60), what="alice's job to be ready")
    alice_log = alice.logs(alice_job).decode()
    assert alice_log.splitlines()[0] == "ty-alice", alice_log

    (state_dir,) = (srv.home / "slurm").iterdir()
    task_dir = state_dir / "jobs" / str(alice_job) / "0" / "main-0-0"
    work = task_dir.with_name("main-0-0.work")
    holders = {
        "client-file": srv.home / "client.json",
        "spec": task_dir / "spec.json",
        "env-file": task_dir / "env",
        "state-script": task_dir / "script.sh",
        "output-log": task_dir / "output.log",
        "work-file": work / "secret-copy.txt",
        "secret-file": task_dir.with_name("main-0-0.secrets") / "token",
        "shm-file": task_dir.parent / ".shm" / "alice-shm",
        "script-copy": task_dir.with_name("main-0-0.sh"),
    }
    admin_token = json.loads(holders["client-file"].read_text())["token"]
    for label, path in holders.items():
        assert (admin_token if label == "client-file" else ALICE_SECRET) in path.read_text(errors="replace"), label
    alice_uid = pwd.getpwnam("ty-alice").pw_uid
    assert _mode(holders["secret-file"]) == ("0o400", alice_uid)
    assert _mode(work) == ("0o700", alice_uid)
    assert _mode(task_dir) == ("0o700", 0)
    assert _mode(state_dir / "jobs" / str(alice_job) / "jobdir") == ("0o700", alice_uid)

    targets = {
        **{label: str(path) for label, path in holders.items()},
        "database": str(srv.home / "trainyard.db"),
        "home-dir": str(srv.home),
        "state-dir": str(state_dir / "jobs"),
        "job-dir": str(state_dir / "jobs" / str(alice_job) / "jobdir"),
        "work-dir": str(work),
        "tmp-file": "/tmp/alice-tmp",
    }
    globs = [f"{srv.home}/**", f"{state_dir}/**", "/tmp/**", "/dev/shm/**", "/var/tmp/**"]
    snoop = "\n".join(f"        {line}" if line else "" for line in SNOOP.strip().splitlines())
    spec = BOB_JOB % {"bob_secret": BOB_SECRET, "targets": json.dumps(targets), "globs": json.dumps(globs),
                      "snoop": snoop}
    bob_job = bob.wait(bob.submit(spec).id, timeout=scaled(60))
    out = bob.logs(bob_job.id).decode(errors="replace")
    assert bob_job.state == "SUCCEEDED", out

    assert ALICE_SECRET not in out and admin_token not in out
    assert out.splitlines()[0] == "ty-bob", out
    # The hard case: one node, one kernel (best fit packs bob's task beside alice's).
    nodes = {c.job(j).attempts[-1].tasks[0].node for c, j in ((alice, alice_job), (bob, bob_job.id))}
    assert len(nodes) == 1, nodes
    for label in targets:
        assert re.search(rf"^ROUTE {label}: DENIED ", out, re.MULTILINE), f"{label}:\n{out}"
    # /proc shows bob's own processes only, and reading them works: his own secret is there.
    processes = int(re.search(r"^PROCESSES (\d+)$", out, re.MULTILINE).group(1))
    assert 1 <= processes <= 5, out
    assert re.search(r"^ROUTE proc-environ: READ ", out, re.MULTILINE) and BOB_SECRET in out
    assert "sleep(600)" not in out  # alice's command line
    for pattern in globs:
        assert f"GLOB {pattern}: " in out, out

    assert re.search(rf"file:{ALICE_SECRET} env:{ALICE_SECRET} gpus:\d pwd:{re.escape(str(work))}$",
                     alice_log, re.MULTILINE), alice_log
    alice.stop(alice_job)
    assert alice.wait(alice_job, timeout=scaled(60)).state == "STOPPED"
