"""Issue 27, findings 1, 3 and 8, on the default `yard up` (as root: per-user task accounts
and the bubblewrap sandbox), each by the route the attacker took.

The storage ``shared`` is the one the README used to recommend: a folder anyone may write
to (``chmod 1777``). bob has a read-only grant on it; carol has none.

1. bob puts a script in it and mounts it, as a file, over the sandbox's privilege drop
   (``subPath: fsp, mountPath: /usr/bin/setpriv``): it ran as root.
3. ``mountPath: /etc/x/y`` made ``/etc/x/y`` on the host, root-owned, left after the job;
   so did any mount point under a folder the host lacks (``/data/...``).
8. From any job, bob wrote into the storage by its path on the node, and carol read it.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server, default_install, require_default_install, shared_folder
from trainyard.client import Client, TrainyardError

pytestmark = pytest.mark.e2e

MARK = uuid.uuid4().hex[:12]


@dataclass
class Cluster:
    server: Server
    admin: Client
    bob: Client
    carol: Client
    shared: Path  # the 1777 storage bob may read
    proof: Path  # root's own 0600 file, which no task may read
    loot: Path  # where a script run as root leaves its proof (a folder anyone may write to)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    require_default_install()
    base = shared_folder("storages-", 0o755)
    shared, loot = base / "shared", base / "loot"
    for folder in (shared, loot):
        folder.mkdir()
        folder.chmod(0o1777)
    (shared / "report.txt").write_text(f"shared-data-{MARK}\n")  # 0644, as a user's files would be
    (shared / "report.txt").chmod(0o644)
    # What the attacker wrote (bob could, through the host path): a script called as setpriv.
    script = shared / "fsp"
    script.write_text(f'#!/bin/sh\nid -u > {loot}/uid\ncat {base}/proof > {loot}/proof\nexec "$@"\n')
    script.chmod(0o755)
    proof = base / "proof"
    proof.write_text(f"root-only-{MARK}\n")
    proof.chmod(0o600)
    try:
        with default_install(tmp_path_factory, gpus=2) as srv:
            tokens = srv.add_users("bob", "carol")
            admin = srv.admin()
            admin.create_storage("shared", str(shared))
            admin.grant_storage("shared", "bob", read_only=True)
            bob, carol = Client(srv.url, tokens["bob"]), Client(srv.url, tokens["carol"])
            yield Cluster(srv, admin, bob, carol, shared, proof, loot)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _job(name: str, commands: list[str], storages: str = "") -> str:
    lines = [f"name: {name}", *([f"storages: {storages}"] if storages else []), "taskRoles:", "  main:",
             "    commands:"]
    return "\n".join([*lines, *(f"      - {c!r}" for c in commands)]) + "\n"


def _refused(client: Client, spec: str) -> TrainyardError:
    try:
        job = client.submit(spec)
    except TrainyardError as exc:
        return exc
    done = client.wait(job.id, timeout=scaled(60))
    log = client.logs(job.id).decode(errors="replace")
    pytest.fail(f"the job was accepted (job {job.id}, {done.state}); its log:\n{log}")


def _run(client: Client, spec: str) -> tuple[str, str]:
    """The job's end state, and its message then its log."""
    job = client.submit(spec)
    done = client.wait(job.id, timeout=scaled(60))
    return done.state, done.message + "\n" + client.logs(job.id).decode(errors="replace")


def test_finding_1_a_storage_mounted_over_the_privilege_drop_is_refused(cluster: Cluster) -> None:
    spec = _job("fsp", ["id -un"], "[{name: shared, subPath: fsp, mountPath: /usr/bin/setpriv}]")
    try:
        error = _refused(cluster.bob, spec)
    finally:
        ran_as = (cluster.loot / "uid").read_text().strip() if (cluster.loot / "uid").exists() else None
        stolen = (cluster.loot / "proof").read_text() if (cluster.loot / "proof").exists() else ""
        assert ran_as is None and MARK not in stolen, f"bob's script ran as uid {ran_as} and read {stolen!r}"
    assert error.status == 422, error.message
    assert any(e["path"] == "storages[0].mountPath" for e in error.errors), error.errors
    assert "/usr/bin/setpriv" in error.message
    # The same file at an allowed place is still no directory: the launch refuses it.
    state, log = _run(cluster.bob, _job("fsp-file", ["cat /mnt/fsp"],
                                        "[{name: shared, subPath: fsp, mountPath: /mnt/fsp}]"))
    assert state == "FAILED" and "subPath 'fsp'" in log and "is not a folder inside the storage" in log, log
    assert not (cluster.loot / "uid").exists()


def test_finding_3_no_mount_point_is_made_on_the_host(cluster: Cluster) -> None:
    made = [Path("/etc/x"), Path("/usr/local/bin/x")]
    existed = {p: p.exists() for p in made}
    try:
        for target in ("/etc/x/y", "/usr/local/bin/x"):
            error = _refused(cluster.bob, _job("etc", ["true"], f"[{{name: shared, mountPath: {target}}}]"))
            assert error.status == 422 and error.errors[0]["path"] == "storages[0].mountPath", error.errors
    finally:
        for path in made:
            if not existed[path] and path.exists():
                shutil.rmtree(path)  # left by today's main
                pytest.fail(f"{path} was made on the host")
    # An allowed mountPath under a folder this host lacks works, and makes nothing here.
    root = Path("/data") if not Path("/data").exists() else Path(f"/workspace-{MARK}")
    assert not root.exists()
    target = Path("/data") / f"in-{MARK}" / "deep"
    try:
        state, log = _run(cluster.bob, _job("data", ['cat "$TRAINYARD_STORAGE_SHARED/report.txt"'],
                                            f"[{{name: shared, mountPath: {target}}}]"))
        assert state == "SUCCEEDED" and f"shared-data-{MARK}" in log, log
        assert not target.exists() and not Path("/data", f"in-{MARK}").exists()
        if root == Path("/data"):
            assert not root.exists(), "/data was made on the host"
    finally:
        if root == Path("/data") and root.exists():
            shutil.rmtree(root)


def test_finding_8_grants_hold_whatever_the_storage_s_file_modes(cluster: Cluster) -> None:
    shared = cluster.shared
    # bob, read-only, writes by the storage's path on the node: from a job that does not
    # mount it, and from one that mounts it read-only elsewhere.
    for name, storages in (("bob-bare", ""), ("bob-mounted", "[{name: shared, mountPath: /mnt/shared}]")):
        state, log = _run(cluster.bob, _job(name, [f"echo {name} > {shared}/{name}.txt || echo DENIED",
                                                   "ls /mnt/shared || true"], storages))
        assert state == "SUCCEEDED", log
        assert not (shared / f"{name}.txt").exists(), f"bob wrote into the storage he may only read:\n{log}"
        assert "DENIED" in log
    # carol, with no grant, reads its 0644 files by their path on the node.
    state, log = _run(cluster.carol, _job("carol", [f"cat {shared}/report.txt || echo DENIED",
                                                    f"ls -1 {shared} | sed s/^/ENTRY:/"]))
    assert f"shared-data-{MARK}" not in log and "DENIED" in log, log
    assert "ENTRY:" not in log, log
    # bob still reads what he may, at the mountPath.
    state, log = _run(cluster.bob, _job("bob-reads", ["cat /mnt/shared/report.txt"],
                                        "[{name: shared, mountPath: /mnt/shared}]"))
    assert state == "SUCCEEDED" and f"shared-data-{MARK}" in log, log


def test_beyond_the_issue_the_job_s_loader_variables_never_reach_what_runs_as_root(cluster: Cluster) -> None:
    """env, bwrap, sh and setpriv run as root in the sandbox before the drop: a job's
    LD_PRELOAD (a library in a storage it may write) would run in them. LD_DEBUG_OUTPUT
    shows who honoured the job's loader variables: each such process writes a file as its
    own uid. Only the task's own processes may."""
    out = cluster.loot / "ld"
    out.mkdir()
    out.chmod(0o1777)
    spec = (f"name: loader\ntaskRoles:\n  main:\n    env: {{LD_DEBUG: files, LD_DEBUG_OUTPUT: {out}/dbg}}\n"
            "    commands: ['echo \"debug=$LD_DEBUG\"']\n")
    state, log = _run(cluster.bob, spec)
    assert state == "SUCCEEDED" and "debug=files" in log, log
    owners = {p.name: p.stat().st_uid for p in out.iterdir()}
    assert owners and 0 not in owners.values(), owners
