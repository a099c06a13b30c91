"""Storages on the local backend (``TaskLaunch.mounts``): a task writes to a read-write one
and, in the sandbox, cannot write to a read-only one, wherever it looks for it; without a
sandbox its log says read-only is not enforced. A home storage is made on first use, 0700,
owned by the task's account."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainyard.backends.base import Mount, TaskLaunch
from trainyard.backends.local.sandbox import find_sandbox
from trainyard.backends.local.taskaccounts import TaskAccounts

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="task accounts need root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]
NOBODY = 65534


@pytest.fixture
def public_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="trainyard-storages-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def storages(public_dir: Path) -> dict[str, Path]:
    """A read-write storage and a read-only one holding a file, both writable by ``nobody``
    on disk: only the mount can make one read-only."""
    paths = {"rw": public_dir / "storage-rw", "ro": public_dir / "storage-ro", "homes": public_dir / "homes"}
    for path in paths.values():
        path.mkdir(mode=0o777)
        path.chmod(0o777)
    (paths["ro"] / "data.txt").write_text("input\n")
    return paths


@pytest.fixture(params=["sandbox", "no sandbox"])
def backend(request, public_dir, make_local):
    sandbox = None
    if request.param == "sandbox":
        sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
        assert sandbox is not None, why
    (public_dir / "home").mkdir(mode=0o700)
    return make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                      work_dir_root=public_dir / "work"), sandbox is not None


SCRIPT = """\
echo "rw=$TRAINYARD_STORAGE_RW ro=$TRAINYARD_STORAGE_RO"
echo out > "$TRAINYARD_STORAGE_RW/out.txt" && echo wrote-rw
cat "$TRAINYARD_STORAGE_RO/data.txt"
(echo x > "$TRAINYARD_STORAGE_RO/new.txt") 2>/dev/null && echo wrote-ro || echo refused-ro
(echo x > "{ro_source}/new2.txt") 2>/dev/null && echo wrote-ro-source || echo refused-ro-source
"""


def test_a_task_writes_to_a_read_write_storage_and_in_the_sandbox_not_to_a_read_only_one(backend, storages) -> None:
    harness, sandboxed = backend
    mounts = (Mount(str(storages["rw"]), str(storages["rw"]), False, "rw"),
              Mount(str(storages["ro"]), "/tmp/inputs", True, "ro"))
    env = {"TRAINYARD_STORAGE_RW": str(storages["rw"]), "TRAINYARD_STORAGE_RO": str(storages["ro"])}
    key = harness.new_key()
    script = SCRIPT.format(ro_source=storages["ro"])
    harness.backend.launch(TaskLaunch(key, harness.node, script, env, user="alice", mounts=mounts))
    status = harness.wait_ended(key)
    lines = harness.log(key).splitlines()
    assert status.exit_code == 0, lines
    assert (storages["rw"] / "out.txt").read_text() == "out\n"
    assert os.stat(storages["rw"] / "out.txt").st_uid == NOBODY  # written as the task's account
    if sandboxed:
        # Bound at its mountPath, read-only there and at its own path.
        assert lines == [f"rw={storages['rw']} ro=/tmp/inputs", "wrote-rw", "input", "refused-ro",
                         "refused-ro-source"]
        assert not (storages["ro"] / "new.txt").exists() and not (storages["ro"] / "new2.txt").exists()
        assert not Path("/tmp/inputs").exists()  # the mount point was in the task's private /tmp
    else:
        # Given as a path, and its log says what could not be honoured.
        assert lines[0].startswith("trainyard: storage 'ro' is read-only for this job, but this node runs tasks "
                                   "without a sandbox")
        assert "not at its mountPath /tmp/inputs" in lines[1]
        assert lines[2:5] == [f"rw={storages['rw']} ro={storages['ro']}", "wrote-rw", "input"]


def test_a_home_storage_is_made_on_first_use_private_to_the_task_s_account(backend, storages) -> None:
    harness, _ = backend
    home = storages["homes"] / "alice"
    mounts = (Mount(str(home), str(home), False, "home", 0o700),)
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, 'echo hi > "$TRAINYARD_STORAGE_HOME/f"\n', {},
                                      user="alice", mounts=mounts))
    assert harness.wait_ended(key).exit_code == 0, harness.log(key)
    info = os.stat(home)
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, NOBODY)
    assert (home / "f").read_text() == "hi\n"
