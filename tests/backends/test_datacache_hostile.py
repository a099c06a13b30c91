"""A node's dataset cache against a hostile user (issue 35): root fetches datasets, so a URL
must not lead it to this machine's own services (loopback, link-local metadata, the
server's own addresses, redirects there), a source that trickles must not hold a task for
ever, an archive of empty folders is bounded like one of files, and a cache folder that
someone else made (or may write) is refused rather than written under. Each was broken
before its fix (``datafetch.refusal``, ``Limit``'s deadline and folders, ``_make_dirs``)."""

from __future__ import annotations

import io
import os
import socket
import stat
import tarfile
from pathlib import Path

import pytest
from backends.datasource import Source, serving, tar_gz

from trainyard.backends import datacache, datafetch
from trainyard.backends.base import DatasetFetch
from trainyard.backends.datacache import NodeCache
from trainyard.backends.datafetch import FetchError
from trainyard.backends.mounts import NodeDatasets
from trainyard.core.addresses import refusal


def item(name: str, source: str, version: str = "1") -> dict:
    fetch = DatasetFetch(name, source, version, f"/data/{name}")
    return {"key": fetch.key, "name": name, "version": version, "source": source, "sha256": "", "storage_root": ""}


@pytest.fixture
def source() -> Source:
    with serving() as running:
        yield running


def _own_address() -> str | None:
    """A non-loopback address of this machine's (the one it would reach the world from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "169.254.169.254",
                                     "fe80::1", "0.0.0.0", "::", "224.0.0.1"])
def test_loopback_link_local_and_unspecified_addresses_are_refused(address: str) -> None:
    assert refusal(address) is not None


def test_an_address_of_this_machine_is_refused_and_another_is_not() -> None:
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no route off itself")
    assert "an address of this machine" in (refusal(own) or "")
    assert refusal("192.0.2.77") is None  # TEST-NET: nobody's


def test_a_url_at_loopback_is_not_fetched_unless_the_admin_allows_its_host(tmp_path: Path, source: Source) -> None:
    url = source.add("/mini.tar.gz", tar_gz({"a": b"a"}))
    cache = NodeCache(tmp_path / "cache", 1 << 20)
    for named in (url, url.replace("127.0.0.1", "localhost"), url.replace("127.0.0.1", "2130706433")):
        with pytest.raises(FetchError, match="loopback address.*dataset_allowed_hosts"):
            cache.ensure(item("mini", named))
    assert source.requests == []  # never connected: nothing sent to the service there
    assert list((tmp_path / "cache" / "entries").iterdir()) == []
    assert NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=("127.0.0.1",)).ensure(item("mini", url)).is_dir()


def test_a_url_at_this_machines_own_address_is_not_fetched(tmp_path: Path, source: Source) -> None:
    own = _own_address()
    if own is None:
        pytest.skip("this machine has no route off itself")
    url = source.add("/mini.tar.gz", tar_gz({"a": b"a"})).replace("127.0.0.1", own)
    with pytest.raises(FetchError, match="an address of this machine"):
        NodeCache(tmp_path / "cache", 1 << 20).ensure(item("mini", url))


def test_a_redirect_is_followed_only_to_an_allowed_host(tmp_path: Path, source: Source) -> None:
    """The first host allowed (a mirror on the server's host, say), it redirects to the same
    service under another name: the redirect's host is checked as the first was."""
    target = source.add("/secret.tar.gz", tar_gz({"token": b"s3cret"}))
    source.redirects["/mini.tar.gz"] = target.replace("127.0.0.1", "localhost")
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=("127.0.0.1",))
    with pytest.raises(FetchError, match="localhost is at .*loopback"):
        cache.ensure(item("mini", source.url + "/mini.tar.gz"))
    assert source.requests == ["/mini.tar.gz"]
    source.redirects["/mini.tar.gz"] = target
    assert (cache.ensure(item("mini", source.url + "/mini.tar.gz")) / "token").read_bytes() == b"s3cret"


def test_a_source_that_trickles_fails_the_fetch_after_its_timeout(tmp_path: Path, source: Source) -> None:
    """Every read returns within a socket's timeout, yet the whole would take seconds: the
    fetch ends at the cache's timeout (dataset_fetch_timeout_s), leaving nothing behind."""
    source.bytes_per_second = 256 << 10  # 64 KiB every quarter second
    url = source.add("/slow.bin", os.urandom(4 << 20))  # 16 s at that pace
    cache = NodeCache(tmp_path / "cache", 64 << 20, timeout=0.5, allowed_hosts=("127.0.0.1",))
    with pytest.raises(FetchError, match="longer than 0.5 s .*dataset_fetch_timeout_s"):
        cache.ensure(item("slow", url))
    assert list((tmp_path / "cache" / "partial").iterdir()) == []
    assert list((tmp_path / "cache" / "entries").iterdir()) == []


def test_an_archive_of_empty_folders_counts_against_the_file_limit(tmp_path: Path, source: Source,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datafetch, "MAX_FILES", 50)  # stands for ten million: each folder is an inode
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for index in range(60):
            info = tarfile.TarInfo(f"d{index}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    url = source.add("/folders.tar.gz", out.getvalue())
    with pytest.raises(FetchError, match="more than 50 files and folders"):
        NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=("127.0.0.1",)).ensure(item("folders", url))


def test_a_name_with_a_newline_or_a_setuid_bit_does_not_survive(tmp_path: Path, source: Source) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("tool")
        info.mode, info.size = 0o6755, 1
        tar.addfile(info, io.BytesIO(b"x"))
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=("127.0.0.1",))
    entry = cache.ensure(item("tool", source.add("/tool.tar", out.getvalue())))
    assert oct((entry / "tool").stat().st_mode & 0o7777) == "0o755"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("a\nb"), io.BytesIO(b""))
    with pytest.raises(FetchError, match="cannot be kept"):
        cache.ensure(item("newline", source.add("/newline.tar", out.getvalue())))


@pytest.mark.parametrize("made", ["writable by others", "a link"])
def test_a_cache_folder_someone_else_may_write_is_refused(tmp_path: Path, made: str) -> None:
    root = tmp_path / "cache"
    if made == "a link":
        (tmp_path / "theirs").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "theirs")
    else:
        root.mkdir()
        os.chmod(root, 0o777)
    with pytest.raises(PermissionError, match="set dataset_cache_dir"):
        NodeCache(root, 1 << 20).ensure(item("x", "http://192.0.2.77/x.bin"))
    with pytest.raises(PermissionError, match="set dataset_cache_dir"):
        NodeCache(root, 1 << 20).read()  # the server's view removes ended uses: not there either
    with pytest.raises(RuntimeError, match="set dataset_cache_dir"):
        NodeDatasets(root)  # the backend, and the server with it, does not start
    assert not (tmp_path / "theirs" / "entries").exists()


def test_the_folders_made_above_a_new_cache_are_no_one_elses_to_change_whatever_the_umask(tmp_path: Path) -> None:
    """A Slurm node's first fetch makes the cache's folders (``/var/cache/trainyard/...``) under
    the step's umask, the user's: a group-writable parent would refuse every later fetch."""
    old = os.umask(0o002)
    try:
        NodeCache(tmp_path / "var" / "cache" / "trainyard" / "n1", 1 << 20).make_dirs()
    finally:
        os.umask(old)
    modes = [stat.S_IMODE(os.stat(tmp_path / path).st_mode) for path in ("var", "var/cache", "var/cache/trainyard",
                                                                          "var/cache/trainyard/n1")]
    assert modes == [0o755, 0o755, 0o755, 0o700]
    NodeCache(tmp_path / "var" / "cache" / "trainyard" / "n1", 1 << 20).check_root()


def test_a_storage_folder_is_copied_with_its_owners_permissions_not_roots(tmp_path: Path) -> None:
    """A shared storage (read by both) holds Bob's private folder; Alice, whose tasks run as
    ``nobody``, registers a dataset of the storage's folder: root copies only what her
    account could read itself, and a dataset of Bob's folder is refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give files to other accounts")
    nobody = (65534, frozenset({65534}))
    storage = tmp_path / "storage"
    team = storage / "team"
    (team / "bob").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    (team / "shared.txt").write_text("everyone")
    (team / "bob" / "secret.txt").write_text("bob's")
    os.chown(team / "bob", 1234, 1234)
    os.chmod(team / "bob", 0o700)
    (team / "hers.txt").write_text("alice's")
    os.chown(team / "hers.txt", 65534, 65534)
    os.chmod(team / "hers.txt", 0o600)
    (team / "root-only.txt").write_text("root's")
    os.chmod(team / "root-only.txt", 0o600)

    def as_alice(source: Path) -> dict:
        fetch = DatasetFetch("team", str(source), "1", "/data/team", storage_root=str(storage), reader="alice")
        return {"key": fetch.key, "name": "team", "version": "1", "source": str(source), "sha256": "",
                "storage_root": str(storage), "reader": [nobody[0], sorted(nobody[1])]}

    cache = NodeCache(tmp_path / "cache", 1 << 20)
    entry = cache.ensure(as_alice(team))
    assert sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*")) == ["hers.txt", "shared.txt"]
    with pytest.raises(FetchError, match="may not read the folder"):
        cache.ensure(as_alice(team / "bob"))
    # An entry is the copy one reader saw: another reader's dataset of the same folder is another.
    mine = DatasetFetch("team", str(team), "1", "/data/team", storage_root=str(storage), reader="alice")
    theirs = DatasetFetch("team", str(team), "1", "/data/team", storage_root=str(storage), reader="bob")
    assert mine.key != theirs.key


def test_room_is_made_while_a_dataset_is_fetched_not_only_after(tmp_path: Path, source: Source) -> None:
    """Capacity for one entry: the old one is evicted as soon as the new fetch's bytes would
    not fit beside it, even though this fetch then fails (its sha256): the disk never holds
    both for the length of a fetch."""
    cache = NodeCache(tmp_path / "cache", 6000, allowed_hosts=("127.0.0.1",))
    cache.ensure(item("old", source.add("/old.bin", os.urandom(4000))), use=False)
    new = item("new", source.add("/new.bin", os.urandom(4000)))
    new["sha256"] = "0" * 64
    with pytest.raises(FetchError, match="not the registered"):
        cache.ensure(new)
    seen = cache.read()
    assert (seen["entries"], seen["evictions"]) == ([], 1)


def test_a_cache_keeps_at_most_max_entries_however_small(tmp_path: Path, source: Source,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty datasets take no room, yet each is an entry (files, a metrics series): past
    ``MAX_ENTRIES`` the least recently used unmounted one goes, as past the capacity."""
    monkeypatch.setattr(datacache, "MAX_ENTRIES", 2)  # stands for a thousand
    cache = NodeCache(tmp_path / "cache", 1 << 20, allowed_hosts=("127.0.0.1",))
    for name in ("a", "b", "c"):
        cache.ensure(item(name, source.add(f"/{name}.tar", tar_gz({}))), use=False)
    seen = cache.read()
    assert ([e["dataset"] for e in seen["entries"]], seen["evictions"]) == (["b", "c"], 1)
