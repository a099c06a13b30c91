"""A node's dataset cache (issue 35), against a real HTTP source on 127.0.0.1 and real
folders: a fetch, a hit, two tasks sharing one fetch, LRU eviction of what no live task
mounts, a new version fetched again, an interrupted fetch cleaned up and retried, and
hostile sources (links, '..', devices, a wrong sha256) refused."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
from backends.datasource import Source, serving, tar_gz

from trainyard.backends.base import DatasetFetch
from trainyard.backends.datacache import NodeCache
from trainyard.backends.datafetch import FetchError

LOCAL = ("127.0.0.1",)  # the test's source, allowed as an admin would (dataset_allowed_hosts)


def item(name: str, source: str, version: str = "1", sha256: str = "", storage_root: str = "") -> dict:
    fetch = DatasetFetch(name, source, version, f"/data/{name}", sha256, storage_root)
    return {"key": fetch.key, "name": name, "version": version, "source": source, "sha256": sha256,
            "storage_root": storage_root}


@pytest.fixture
def source() -> Source:
    with serving() as running:
        yield running


def ended_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then let go)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ended_task() -> int:
    """The pid of a task that has ended: its use no longer keeps an entry."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_dataset_is_fetched_once_then_found_in_the_cache(tmp_path: Path, source: Source) -> None:
    archive = tar_gz({"train/a.txt": b"alpha", "train/b.txt": b"beta" * 100})
    url = source.add("/mini.tar.gz", archive)
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    said: list[str] = []
    entry = cache.ensure(item("mini", url), said.append)
    assert (entry / "train" / "a.txt").read_bytes() == b"alpha"
    assert oct((entry / "train" / "a.txt").stat().st_mode & 0o777) == "0o644"
    # What was read from the source (the archive, compressed), and what it unpacked to.
    assert said[0] == "trainyard: fetching dataset mini (version 1) into this node's cache"  # while it runs
    assert f"fetched {len(archive)} bytes" in said[1] and "(405 bytes, 2 files unpacked)" in said[1]
    assert cache.ensure(item("mini", url), said.append) == entry
    assert "is in this node's cache" in said[2]
    assert source.requests == ["/mini.tar.gz"]
    seen = cache.read()
    assert (seen["hits"], seen["misses"], seen["bytes_fetched"], seen["evictions"]) == (1, 1, len(archive), 0)
    assert [(e["dataset"], e["size"], e["files"], e["in_use"]) for e in seen["entries"]] == [("mini", 405, 2, 1)]
    assert list((tmp_path / "cache" / "partial").iterdir()) == []


def test_two_tasks_that_need_one_dataset_cause_one_fetch(tmp_path: Path, source: Source) -> None:
    url = source.add("/shared.tar", tar_gz({"x": b"x" * 1000}))
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    source.hold.clear()  # the first fetch waits on the source while the second task asks
    entries: list[Path] = []
    tasks = [threading.Thread(target=lambda: entries.append(cache.ensure(item("shared", url)))) for _ in range(2)]
    for task in tasks:
        task.start()
    source.hold.set()
    for task in tasks:
        task.join()
    assert entries[0] == entries[1] and (entries[0] / "x").stat().st_size == 1000
    assert source.requests == ["/shared.tar"]
    seen = cache.read()
    assert (seen["hits"], seen["misses"]) == (1, 1)


def test_the_least_recently_used_entry_no_task_mounts_is_evicted(tmp_path: Path, source: Source) -> None:
    body = os.urandom(4000)  # incompressible: each entry holds 4000 bytes
    urls = {name: source.add(f"/{name}.bin", body) for name in ("old", "busy", "new")}
    cache = NodeCache(tmp_path / "cache", 9000, allowed_hosts=LOCAL)  # two entries fit, not three
    old = cache.ensure(item("old", urls["old"]), pid=ended_task())
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        cache.ensure(item("busy", urls["busy"]), pid=sleeper.pid)
        os.utime(tmp_path / "cache" / "meta" / f"{item('busy', urls['busy'])['key']}.json", (1, 1))  # least recent
        cache.ensure(item("new", urls["new"]), pid=ended_task())
        seen = cache.read()
        # "busy" is the least recently used but a live task mounts it: "old" goes instead.
        assert sorted(e["dataset"] for e in seen["entries"]) == ["busy", "new"]
        assert seen["evictions"] == 1 and not old.exists()
        assert seen["used"] == 8000
    finally:
        sleeper.kill()
        sleeper.wait()
    # Once its task has ended, "busy" may go too.
    cache.capacity = 4000
    assert cache.evict() == [item("busy", urls["busy"])["key"]]


def test_a_new_version_is_fetched_again_never_served_stale(tmp_path: Path, source: Source) -> None:
    url = source.add("/d.tar.gz", tar_gz({"v": b"one"}))
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    first = cache.ensure(item("d", url, "1"))
    source.bodies["/d.tar.gz"] = tar_gz({"v": b"two"})
    second = cache.ensure(item("d", url, "2"))
    assert first != second
    assert ((first / "v").read_bytes(), (second / "v").read_bytes()) == (b"one", b"two")
    assert len(source.requests) == 2


def test_an_interrupted_fetch_is_never_mounted_and_is_cleaned_up_and_retried(tmp_path: Path, source: Source) -> None:
    body = tar_gz({"big": os.urandom(200_000)})
    url = source.add("/cut.tar.gz", body)
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    wanted = item("cut", url)
    source.cut_short.add("/cut.tar.gz")
    with pytest.raises(FetchError):
        cache.ensure(wanted)
    assert not (tmp_path / "cache" / "entries" / wanted["key"]).exists()
    assert list((tmp_path / "cache" / "partial").iterdir()) == []
    # A fetch whose process was killed leaves its folder: the next one removes it first.
    leftover = tmp_path / "cache" / "partial" / f"{wanted['key']}.99999"
    leftover.mkdir()
    (leftover / "big").write_bytes(b"half")
    source.cut_short.clear()
    entry = cache.ensure(wanted)
    assert (entry / "big").stat().st_size == 200_000 and not leftover.exists()


def _tar(add: object) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        add(tar)  # type: ignore[operator]
    return out.getvalue()


def _member(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize(("add", "said"), [
    (lambda t: _member(t, "../escape"), "'..'"),
    (lambda t: _member(t, "/etc/cron.d/x"), "absolute"),
    (lambda t: _member(t, "link", tarfile.SYMTYPE, "/etc/shadow"), "a link"),
    (lambda t: _member(t, "hard", tarfile.LNKTYPE, "/etc/shadow"), "a link"),
    (lambda t: _member(t, "dev", tarfile.CHRTYPE), "a device"),
    (lambda t: _member(t, "fifo", tarfile.FIFOTYPE), "a device, FIFO"),
], ids=["dotdot", "absolute", "symlink", "hardlink", "device", "fifo"])
def test_a_hostile_archive_is_refused_and_leaves_nothing(tmp_path: Path, source: Source, add: object,
                                                          said: str) -> None:
    url = source.add("/bad.tar", _tar(add))
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    with pytest.raises(FetchError, match=said):
        cache.ensure(item("bad", url))
    assert list((tmp_path / "cache" / "entries").iterdir()) == []
    assert list((tmp_path / "cache" / "partial").iterdir()) == []


def test_a_changed_archive_fails_its_sha256_and_a_too_big_one_the_capacity(tmp_path: Path, source: Source) -> None:
    body = tar_gz({"a": b"a"})
    url = source.add("/a.tar.gz", body)
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    with pytest.raises(FetchError, match="not the registered"):
        cache.ensure(item("a", url, sha256="0" * 64))
    assert cache.ensure(item("a", url, sha256=hashlib.sha256(body).hexdigest())).is_dir()
    big = source.add("/big.bin", b"b" * 2000)
    with pytest.raises(FetchError, match="bigger than this node's cache"):
        NodeCache(tmp_path / "small", 1000, allowed_hosts=LOCAL).ensure(item("big", big))


def test_a_storage_folder_is_copied_without_following_links(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    (storage / "sets" / "d" / "sub").mkdir(parents=True)
    (storage / "sets" / "d" / "sub" / "f.txt").write_text("data")
    (storage / "sets" / "d" / "secret").symlink_to("/etc/hostname")
    os.mkfifo(storage / "sets" / "d" / "pipe")
    (storage / "sets" / "link").symlink_to(storage / "sets" / "d")
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    entry = cache.ensure(item("d", str(storage / "sets" / "d"), storage_root=str(storage)))
    assert sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*")) == ["sub", "sub/f.txt"]
    with pytest.raises(FetchError, match="without following links"):
        cache.ensure(item("l", str(storage / "sets" / "link"), storage_root=str(storage)))


def _two_entries(cache: NodeCache, source: Source) -> list[str]:
    """Two entries of 400 bytes each that no live task uses (either may be evicted)."""
    for name in ("a", "b"):
        cache.ensure(item(name, source.add(f"/{name}.bin", b"x" * 400)), pid=ended_task())
    return sorted(e["dataset"] for e in cache.read()["entries"])


def test_a_dataset_known_to_be_bigger_than_the_cache_is_refused_before_anything_is_evicted(
        tmp_path: Path, source: Source) -> None:
    """Content-Length, or a storage folder's size walked first: the others' entries stay."""
    cache = NodeCache(tmp_path / "cache", 1000, allowed_hosts=LOCAL)
    assert _two_entries(cache, source) == ["a", "b"]
    storage = tmp_path / "storage"
    (storage / "big").mkdir(parents=True)
    for index in range(3):
        (storage / "big" / f"{index}.bin").write_bytes(b"y" * 400)
    for big in (item("big", source.add("/big.bin", b"z" * 2000)),
                item("folder", str(storage / "big"), storage_root=str(storage))):
        with pytest.raises(FetchError, match=rf"dataset {big['name']} \(version 1\): the dataset is bigger than "
                                             "this node's cache: .* nothing was evicted"):
            cache.ensure(big)
    seen = cache.read()
    assert (sorted(e["dataset"] for e in seen["entries"]), seen["evictions"]) == (["a", "b"], 0)
    assert source.requests.count("/big.bin") == 1


def test_a_dataset_of_unknown_size_evicts_only_as_its_bytes_come(tmp_path: Path, source: Source) -> None:
    """No Content-Length: the fetch makes room for the bytes it has, never the whole cache at once."""
    cache = NodeCache(tmp_path / "cache", 1000, allowed_hosts=LOCAL)
    _two_entries(cache, source)
    url = source.add("/fits.bin", b"f" * 500)
    source.unsized.add("/fits.bin")
    cache.ensure(item("fits", url))
    seen = cache.read()
    assert (sorted(e["dataset"] for e in seen["entries"]), seen["evictions"]) == (["b", "fits"], 1)


def test_a_source_that_answers_404_is_said_as_such_naming_the_dataset(tmp_path: Path, source: Source) -> None:
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    with pytest.raises(FetchError) as caught:
        cache.ensure(item("gone", source.url + "/gone.tar?X-Amz-Signature=secret"))
    assert str(caught.value) == f"dataset gone (version 1): could not fetch {source.url}/gone.tar: HTTP 404 Not Found"
    url = source.add("/short.bin", b"s" * 1000)
    source.cut_short.add("/short.bin")  # half its bytes, then the connection closes
    with pytest.raises(FetchError, match="could not fetch"):
        cache.ensure(item("short", url))
    seen = cache.read()  # failures counted, and the bytes a failed fetch read
    assert (seen["fetch_failures"], seen["misses"], seen["bytes_fetched"]) == (2, 0, 500)


def test_a_failure_that_may_pass_is_told_from_one_that_fails_the_same_way_again(tmp_path: Path,
                                                                              source: Source) -> None:
    """A source that is down, busy or cut the connection short may be back (the task is retried
    as a platform fault); one that answers 404 or 403, or a changed archive, fails again."""
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=LOCAL)
    url = source.add("/short.bin", b"s" * 1000)
    source.cut_short.add("/short.bin")
    body = tar_gz({"a.txt": b"a"})
    source.add("/data.tar.gz", body)
    for path, code in (("/down.tar", 503), ("/busy.tar", 429), ("/gone.tar", 404), ("/mine.tar", 403)):
        source.errors[path] = code
    closed = f"http://127.0.0.1:{ended_port()}/x.tar"
    cases = {"down": (source.url + "/down.tar", True), "busy": (source.url + "/busy.tar", True),
             "short": (url, True), "closed": (closed, True), "gone": (source.url + "/gone.tar", False),
             "mine": (source.url + "/mine.tar", False)}
    for name, (where, transient) in cases.items():
        with pytest.raises(FetchError) as caught:
            cache.ensure(item(name, where))
        assert caught.value.transient is transient, (name, str(caught.value))
    with pytest.raises(FetchError) as caught:
        cache.ensure(item("changed", source.url + "/data.tar.gz", sha256="0" * 64))
    assert not caught.value.transient


def test_a_fetch_under_way_says_how_far_it_is(tmp_path: Path, source: Source,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.backends import datafetch

    monkeypatch.setattr(datafetch, "PROGRESS_SECONDS", 0.0)  # at every check, not every 10 s
    cache = NodeCache(tmp_path / "cache", 16 << 20, allowed_hosts=LOCAL)
    said: list[str] = []
    cache.ensure(item("big", source.add("/big.bin", b"b" * (3 << 20))), said.append)
    assert said[0] == "trainyard: fetching dataset big (version 1) into this node's cache"
    assert "trainyard: fetching dataset big: 1.0 MiB of 3.0 fetched" in said


def test_a_slurm_task_whose_dataset_may_come_back_is_a_platform_fault_and_one_that_cannot_a_failure(
        tmp_path: Path) -> None:
    """What the Slurm backend reads of a task whose datasets failed (its runner wrote exit 127,
    dataset-step.py the failure through ``record_failure``): no exit status when it may pass."""
    from trainyard.backends.base import TaskKey
    from trainyard.backends.datacache import DATASET_UNAVAILABLE, record_failure
    from trainyard.backends.slurm.taskrecords import exit_status

    key = TaskKey(1, 0, "w", 0)
    for transient, code in ((True, None), (False, 127)):
        task_dir = tmp_path / str(transient)
        task_dir.mkdir()
        (task_dir / "exit").write_text("127\n")
        why = record_failure(str(task_dir), FetchError("dataset d (version 1): HTTP 503", transient=transient))
        status = exit_status(key, task_dir)
        assert status is not None
        assert (status.running, status.exit_code, status.reason, status.message) == (False, code, DATASET_UNAVAILABLE,
                                                                                      why)

