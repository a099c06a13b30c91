"""Datasets on the local backend (issue 35, ``TaskLaunch.datasets``): the supervisor fetches
a task's dataset into the node's cache before the task starts; in the sandbox the task
reads it read-only at its mountPath and sees nothing else of the cache; a second task finds
it there (one fetch); the backend reports the cache (``DatasetCaches``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends.datasource import Source, serving, tar_gz
from podman_support import needs_podman

from trainyard.backends.base import DatasetCaches, DatasetFetch, TaskLaunch
from trainyard.backends.datacache import DATASET_UNAVAILABLE
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.sandboxjoin import SANDBOX_NOT_FOUND_HINT
from trainyard.backends.taskaccounts import TaskAccounts

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="task accounts need root"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

SCRIPT = """\
echo "at=$TRAINYARD_DATASET_MINI"
cat /data/mini/train/a.txt
(echo x > /data/mini/train/new.txt) 2>/dev/null && echo wrote || echo refused
ls {cache} 2>/dev/null | wc -l
"""


@pytest.fixture
def public_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="trainyard-datasets-", dir="/var/lib"))
    base.chmod(0o755)
    (base / "home").mkdir(mode=0o700)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def source() -> Iterator[Source]:
    with serving() as running:
        yield running


def test_a_sandboxed_task_reads_its_dataset_read_only_and_a_second_task_finds_it_cached(
        public_dir: Path, source: Source, make_local) -> None:
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                         work_dir_root=public_dir / "work", dataset_cache=(public_dir / "cache", 1 << 20),
                         dataset_sources=(60.0, ("127.0.0.1",)))
    archive = tar_gz({"train/a.txt": b"alpha\n"})
    url = source.add("/mini.tar.gz", archive)
    dataset = DatasetFetch("mini", url, "v1", "/data/mini")
    logs = []
    for _ in range(2):
        key = harness.new_key()
        harness.backend.launch(TaskLaunch(key, harness.node, SCRIPT.format(cache=public_dir / "cache"), {},
                                          user="alice", datasets=(dataset,)))
        status = harness.wait_ended(key)
        logs.append(harness.log(key))
        assert status.exit_code == 0, logs[-1]
        assert logs[-1].splitlines()[-4:] == ["at=/data/mini", "alpha", "refused", "0"], logs[-1]
    assert f"fetched {len(archive)} bytes" in logs[0] and "(6 bytes, 1 files unpacked)" in logs[0]
    assert "is in this node's cache" in logs[1]
    assert source.requests == ["/mini.tar.gz"]
    assert isinstance(harness.backend, DatasetCaches)
    (cache,) = harness.backend.dataset_caches()
    assert (cache.hits, cache.misses, cache.bytes_fetched, cache.capacity_bytes) == (1, 1, len(archive), 1 << 20)
    assert [(e.dataset, e.version, e.in_use) for e in cache.entries] == [("mini", "v1", 0)]


def test_a_dataset_that_cannot_be_fetched_or_a_program_the_sandbox_hides_says_why(public_dir: Path,
                                                                                  source: Source, make_local) -> None:
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                         work_dir_root=public_dir / "work", dataset_sources=(60.0, ("127.0.0.1",)))
    dataset = DatasetFetch("gone", source.url + "/gone.tar", "v1", "/data/gone")
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, "echo ran\n", {}, user="alice", datasets=(dataset,)))
    status = harness.wait_ended(key)
    why = f"dataset gone (version v1): could not fetch {source.url}/gone.tar: HTTP 404 Not Found"
    # Its status says what failed (not "command not found"), and so does its log (not a repr).
    assert (status.exit_code, status.reason, status.message) == (127, DATASET_UNAVAILABLE, why)
    assert harness.log(key).splitlines()[-1] == f"trainyard: {why}"
    assert "ran" not in harness.log(key).splitlines()
    # A source that is down may be back: no exit status, so the task is LOST and its job
    # retried as a platform fault, saying why, instead of failing for good.
    source.errors["/down.tar"] = 503
    down = harness.new_key()
    harness.backend.launch(TaskLaunch(down, harness.node, "echo ran\n", {}, user="alice",
                                      datasets=(DatasetFetch("down", source.url + "/down.tar", "v1", "/data/down"),)))
    status = harness.wait_ended(down)
    why = f"dataset down (version v1): could not fetch {source.url}/down.tar: HTTP 503 Service Unavailable"
    assert (status.exit_code, status.reason, status.message) == (None, DATASET_UNAVAILABLE, why)
    # (Beside them, in the same sandbox:) a program the sandbox hides — a new user's venv whose
    # Python links into pyenv's under /root — is not found, and its status says where to look.
    hidden = harness.new_key()
    harness.backend.launch(TaskLaunch(hidden, harness.node, "/root/.pyenv/versions/venv/bin/python3 train.py\n",
                                      {}, user="alice"))
    status = harness.wait_ended(hidden)
    assert (status.exit_code, status.message) == (126, SANDBOX_NOT_FOUND_HINT)  # /root: "Permission denied"


def test_a_storage_folder_dataset_holds_only_what_its_owners_account_may_read(public_dir: Path,
                                                                             make_local) -> None:
    """Root copies a shared storage's folder for Alice (whose tasks run as ``nobody``): her
    task finds the team's file, not the one only root may read."""
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                         work_dir_root=public_dir / "work", dataset_cache=(public_dir / "cache", 1 << 20))
    team = public_dir / "storage" / "team"
    team.mkdir(parents=True)
    (team / "shared.txt").write_text("team\n")
    (team / "private.txt").write_text("root's\n")
    os.chmod(team / "private.txt", 0o600)
    dataset = DatasetFetch("team", str(team), "v1", "/data/team", storage_root=str(public_dir / "storage"),
                           reader="alice")
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, "echo $(ls /data/team)\n", {}, user="alice",
                                      datasets=(dataset,)))
    status = harness.wait_ended(key)
    assert status.exit_code == 0, harness.log(key)
    assert harness.log(key).splitlines()[-1] == "shared.txt", harness.log(key)


def test_a_task_stopped_while_its_dataset_is_fetched_leaves_nothing_mounted_and_the_next_fetches_it(
        public_dir: Path, source: Source, make_local) -> None:
    sandbox, why = find_sandbox("bwrap", hidden=[public_dir / "home"])
    assert sandbox is not None, why
    harness = make_local(public_dir / "home" / "state", accounts=TaskAccounts({"alice": "nobody"}), sandbox=sandbox,
                         work_dir_root=public_dir / "work", dataset_cache=(public_dir / "cache", 1 << 20),
                         dataset_sources=(60.0, ("127.0.0.1",)))
    url = source.add("/mini.tar.gz", tar_gz({"train/a.txt": b"alpha\n"}))
    dataset = DatasetFetch("mini", url, "v1", "/data/mini")
    source.hold.clear()  # the source answers nothing until released: the fetch is under way
    stopped = harness.new_key()
    harness.backend.launch(TaskLaunch(stopped, harness.node, "echo ran\n", {}, user="alice", datasets=(dataset,)))
    harness.wait_until(lambda: source.requests)
    partial = public_dir / "cache" / "partial"
    assert [p.name.split(".")[0] for p in partial.iterdir()] == [dataset.key]
    harness.backend.stop(stopped, 5.0)
    status = harness.wait_ended(stopped)
    assert status.exit_code != 0 and "ran" not in harness.log(stopped).splitlines()
    assert not (public_dir / "cache" / "entries" / dataset.key).exists()
    source.hold.set()
    key = harness.new_key()
    harness.backend.launch(TaskLaunch(key, harness.node, SCRIPT.format(cache=public_dir / "cache"), {},
                                      user="alice", datasets=(dataset,)))
    assert harness.wait_ended(key).exit_code == 0, harness.log(key)
    assert "alpha" in harness.log(key).splitlines()
    assert list(partial.iterdir()) == []


@needs_podman
def test_a_task_in_a_container_reads_its_dataset_read_only_at_its_mount_path(podman_local, image, source) -> None:
    url = source.add("/mini.tar.gz", tar_gz({"train/a.txt": b"alpha\n"}))
    podman_local.backend.datasets.cache.allowed_hosts = ("127.0.0.1",)  # the test's source, as an admin allows
    key = podman_local.new_key()
    podman_local.backend.launch(TaskLaunch(
        key, podman_local.node, "cat $TRAINYARD_DATASET_MINI/train/a.txt\n"
        "(echo x > /data/mini/new) 2>/dev/null && echo wrote || echo refused\n", {}, image=image,
        datasets=(DatasetFetch("mini", url, "v1", "/data/mini"),), memory_mb=512, cpu_milli=1000))
    status = podman_local.wait_ended(key, timeout=120)
    assert status.exit_code == 0, podman_local.log(key)
    assert podman_local.log(key).splitlines()[-2:] == ["alpha", "refused"]
