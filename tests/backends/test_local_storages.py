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
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.taskaccounts import TaskAccounts

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


# -- issue 27: where a storage may land, what a subPath may be, what the task sees of the rest --


@pytest.fixture
def sandboxed(public_dir, make_local):
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    (public_dir / "home").mkdir(mode=0o700)
    return make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                      work_dir_root=public_dir / "work")


@pytest.mark.parametrize("target", ["/usr/bin/setpriv", "/bin/setpriv", "/etc/x/y", "/usr/local/bin/x", "/usr",
                                    "/lib/x86_64-linux-gnu", "/"])
def test_a_stored_job_s_mount_over_what_root_runs_is_refused_at_launch(sandboxed, storages, target) -> None:
    """What submit refuses (``storage_mount_roots``) the sandbox refuses again, whatever the
    settings: a job stored before, or a bug above, still cannot cover the privilege drop."""
    (storages["rw"] / "fsp").mkdir()
    mounts = (Mount(str(storages["rw"] / "fsp"), target, True, "rw", root=str(storages["rw"])),)
    with pytest.raises(ValueError, match="cannot be mounted at"):
        sandboxed.backend.launch(TaskLaunch(sandboxed.new_key(), sandboxed.node, "true\n", {}, user="alice",
                                            mounts=mounts))
    assert not Path("/etc/x").exists() and not Path("/usr/local/bin/x").exists()


@pytest.mark.parametrize("kind", ["file", "link out", "link inside", "missing"])
def test_a_sub_path_is_a_folder_inside_the_storage_reached_without_a_link(sandboxed, storages, kind) -> None:
    rw = storages["rw"]
    (rw / "dir").mkdir()
    {"file": lambda p: p.write_text("#!/bin/sh\n"), "link out": lambda p: p.symlink_to("/usr/bin"),
     "link inside": lambda p: p.symlink_to(rw / "dir"), "missing": lambda p: None}[kind](rw / "sub")
    mounts = (Mount(str(rw / "sub"), "/mnt/x", True, "rw", root=str(rw)),)
    with pytest.raises(ValueError, match=r"subPath 'sub': .*/sub is not a folder inside the storage"):
        sandboxed.backend.launch(TaskLaunch(sandboxed.new_key(), sandboxed.node, "true\n", {}, user="alice",
                                            mounts=mounts))


def test_the_supervisor_opens_the_sub_path_itself_so_a_swap_after_launch_is_refused(storages) -> None:
    """The gap between the launch's check and bwrap's mount: the supervisor opens each part
    again with O_NOFOLLOW and bwrap binds that descriptor, never the path."""
    from trainyard.backends.sandboxjoin import open_inside, open_mount_fds

    rw = storages["rw"]
    (rw / "a" / "b").mkdir(parents=True)
    fd = open_inside(str(rw), "a/b")
    assert os.path.samestat(os.fstat(fd), os.stat(rw / "a" / "b"))
    os.close(fd)
    shutil.rmtree(rw / "a")
    (rw / "a").symlink_to("/usr")  # the same subPath a/bin now leads to /usr/bin
    with pytest.raises(ValueError, match="is not a folder inside the storage"):
        open_mount_fds([[64, str(rw), "a/bin"]])


def test_the_task_sees_only_its_own_storages_and_mount_points_make_nothing_on_the_host(sandboxed, storages,
                                                                                       public_dir) -> None:
    """Every storage's path is hidden (grants, not file modes); a mount point under a
    top-level folder the host lacks is made in the sandbox's own root."""
    other = public_dir / "storage-other"
    other.mkdir(mode=0o777)
    (other / "theirs.txt").write_text("not granted\n")
    (storages["ro"] / "inside").mkdir()
    top = Path(f"/trainyard-test-{os.getpid()}")
    assert not top.exists()
    mounts = (Mount(str(storages["ro"] / "inside"), str(top / "in" / "here"), True, "ro", root=str(storages["ro"])),
              Mount(str(storages["rw"]), "/mnt/rw", False, "rw", root=str(storages["rw"])))
    script = (f'cat {other}/theirs.txt 2>/dev/null || echo hidden-other\n'
              f'ls {storages["ro"]} 2>/dev/null | wc -l\n'
              f'(echo x > {storages["ro"]}/new.txt) 2>/dev/null && echo wrote-ro-path || echo refused-ro-path\n'
              f'(echo x > {top}/in/here/new.txt) 2>/dev/null && echo wrote-ro || echo refused-ro\n'
              'echo y > /mnt/rw/y.txt && echo wrote-rw\n'
              f'stat -c %a {top} {top}/in\n')
    key = sandboxed.new_key()
    sandboxed.backend.launch(TaskLaunch(key, sandboxed.node, script, {}, user="alice", mounts=mounts,
                                        storage_paths=(str(other), str(storages["ro"]), str(storages["rw"]))))
    status = sandboxed.wait_ended(key)
    lines = sandboxed.log(key).splitlines()
    assert status.exit_code == 0, lines
    assert lines == ["hidden-other", "0", "refused-ro-path", "refused-ro", "wrote-rw", "755", "755"]
    assert (storages["rw"] / "y.txt").read_text() == "y\n"
    assert not top.exists()


def test_mount_points_inside_one_another_or_the_task_s_own_folders_are_refused(sandboxed, storages) -> None:
    nested = (Mount(str(storages["rw"]), "/mnt/a", False, "rw"), Mount(str(storages["ro"]), "/mnt/a/b", True, "ro"))
    with pytest.raises(ValueError, match="inside another storage's mount point /mnt/a"):
        sandboxed.backend.launch(TaskLaunch(sandboxed.new_key(), sandboxed.node, "true\n", {}, user="alice",
                                            mounts=nested))
    key = sandboxed.new_key()
    work = sandboxed.backend.work_dir(key)
    inside_work = (Mount(str(storages["rw"]), str(work / "x"), False, "rw"),)
    with pytest.raises(ValueError, match="the task's own"):
        sandboxed.backend.launch(TaskLaunch(key, sandboxed.node, "true\n", {}, user="alice", mounts=inside_work))


def test_the_job_s_loader_variables_reach_the_task_not_what_runs_as_root_before_the_drop(sandboxed,
                                                                                         public_dir) -> None:
    """env, bwrap, sh and setpriv run as root before the drop: a job's LD_PRELOAD (a library
    in a storage) would run in them as root. The loader's variables skip them and are set
    again after the drop, for the task. LD_DEBUG_OUTPUT shows who honoured them: each
    process the loader saw them in writes a file, owned by its uid."""
    out = public_dir / "loader"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    env = {"LD_DEBUG": "files", "LD_DEBUG_OUTPUT": str(out / "dbg"), "LD_LIBRARY_PATH": "/opt/mine"}
    key = sandboxed.new_key()
    sandboxed.backend.launch(TaskLaunch(key, sandboxed.node, 'echo "lib=$LD_LIBRARY_PATH"\n', env, user="alice"))
    assert sandboxed.wait_ended(key).exit_code == 0, sandboxed.log(key)
    assert "lib=/opt/mine" in sandboxed.log(key)
    owners = {os.stat(p).st_uid for p in out.iterdir()}
    assert owners == {NOBODY}, owners  # the task's bash only; nothing as root
