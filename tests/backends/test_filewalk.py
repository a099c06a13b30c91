"""A job's files read for its owner (``backends/filewalk``), where every name is the task's:
symlinks out (at the end and mid-path), a folder or file swapped for a symlink between the
look and the open, FIFOs, sockets, hard links, ``..``, absolute paths, NUL, names with
newlines or not UTF-8, a huge sparse file, and the bound on a listing."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from trainyard.backends import filewalk
from trainyard.backends.filewalk import BadPath, NotThere, Refused, list_dir, open_file, split_path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A job's directory beside a secret it must never hand out."""
    (tmp_path / "secret").write_text("the server's token")
    root = tmp_path / "jobdir"
    (root / "out").mkdir(parents=True)
    (root / "out" / "result.json").write_text('{"acc": 0.9}')
    return root


def read(root: Path, path: str) -> bytes:
    opened = open_file(root, split_path(path))
    return b"".join(opened.chunks(0, opened.size))


def test_a_plain_file_is_read_and_a_folder_listed(tree: Path) -> None:
    assert read(tree, "out/result.json") == b'{"acc": 0.9}'
    listing = list_dir(tree, [])
    assert [(e.name, e.kind) for e in listing.entries] == [("out", "dir")]
    assert [(e.name, e.kind, e.size) for e in list_dir(tree, ["out"]).entries] == [("result.json", "file", 12)]


@pytest.mark.parametrize("path", ["../secret", "out/../../secret", "/etc/passwd", "out//result.json", "./out",
                                  "out/\0x"])
def test_a_path_that_is_not_plain_names_is_refused_before_any_look(path: str) -> None:
    with pytest.raises(BadPath):
        split_path(path)


def test_a_trailing_slash_is_a_folder_s_path() -> None:
    assert split_path("out/") == ["out"] and split_path("") == []


def test_symlinks_are_shown_never_followed_at_the_end_or_mid_path(tree: Path) -> None:
    (tree / "shadow").symlink_to("/etc/shadow")
    (tree / "up").symlink_to(tree.parent)  # a folder out of the tree
    (tree / "out" / "secret").symlink_to(tree.parent / "secret")
    listed = {e.name: e for e in list_dir(tree, []).entries}
    assert listed["shadow"].kind == "link" and listed["shadow"].target == "/etc/shadow"
    assert listed["up"].kind == "link" and listed["up"].target == str(tree.parent)
    for path in ("shadow", "out/secret", "up/secret"):
        with pytest.raises(Refused, match="symbolic link"):
            read(tree, path)
    with pytest.raises(Refused, match="symbolic link"):
        list_dir(tree, ["up"])


def test_the_root_itself_as_a_symlink_is_refused(tree: Path) -> None:
    link = tree.parent / "linked"
    link.symlink_to(tree)
    with pytest.raises(Refused):
        list_dir(link, [])
    with pytest.raises(NotThere):
        list_dir(tree.parent / "missing", [])


def test_a_folder_swapped_for_a_symlink_mid_walk_is_not_followed(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk holds each folder open: a swap of ``out`` after it was opened leaves the
    walk in the real folder; a swap before it is opened is refused by O_NOFOLLOW."""
    real_step = filewalk._step
    swapped = tree / "out.real"

    def swap_then_step(fd: int, name: str, shown: str) -> int:
        if name == "out" and not swapped.exists():
            os.rename(tree / "out", swapped)
            (tree / "out").symlink_to(tree.parent)  # now out/secret would be the server's
        return real_step(fd, name, shown)

    monkeypatch.setattr(filewalk, "_step", swap_then_step)
    with pytest.raises(Refused, match="symbolic link"):
        read(tree, "out/secret")


def test_a_file_swapped_for_a_symlink_after_the_look_is_refused_at_the_open(tree: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real_lstat = filewalk._lstat_at

    def look_then_swap(parent: int, name: str) -> os.stat_result:
        seen = real_lstat(parent, name)  # a plain file, when looked at
        os.unlink(tree / "out" / "result.json")
        (tree / "out" / "result.json").symlink_to(tree.parent / "secret")
        return seen

    monkeypatch.setattr(filewalk, "_lstat_at", look_then_swap)
    with pytest.raises(Refused, match="symbolic link"):
        read(tree, "out/result.json")


def test_a_file_swapped_for_a_fifo_after_the_look_neither_blocks_nor_is_read(tree: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real_lstat = filewalk._lstat_at

    def look_then_swap(parent: int, name: str) -> os.stat_result:
        seen = real_lstat(parent, name)
        os.unlink(tree / "out" / "result.json")
        os.mkfifo(tree / "out" / "result.json")  # no writer: a blocking open would never return
        return seen

    monkeypatch.setattr(filewalk, "_lstat_at", look_then_swap)
    with pytest.raises(Refused, match="not a regular file"):
        read(tree, "out/result.json")


def test_fifos_sockets_and_devices_are_listed_as_other_and_never_opened(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    server = socket.socket(socket.AF_UNIX)
    short = Path("/tmp") / f"fw-{os.getpid()}-{threading.get_ident()}.sock"  # a socket path's length is limited
    server.bind(str(short))
    os.rename(short, tree / "sock")
    try:
        listed = {e.name: e.kind for e in list_dir(tree, []).entries}
        assert listed["pipe"] == "other" and listed["sock"] == "other"
        for name in ("pipe", "sock"):
            with pytest.raises(Refused, match="not a regular file"):
                read(tree, name)
        (tree / "null").symlink_to("/dev/null")
        with pytest.raises(Refused):
            read(tree, "null")
    finally:
        server.close()


def test_a_hard_linked_file_is_refused(tree: Path) -> None:
    os.link(tree.parent / "secret", tree / "copy")
    with pytest.raises(Refused, match="2 hard links"):
        read(tree, "copy")


def test_a_folder_is_listed_not_read_and_a_file_is_not_walked_into(tree: Path) -> None:
    with pytest.raises(Refused, match="folder"):
        read(tree, "out")
    with pytest.raises(Refused, match="not a folder"):
        list_dir(tree, ["out", "result.json"])
    with pytest.raises(NotThere):
        read(tree, "out/missing")


def test_odd_names_are_listed_and_read_and_names_not_utf8_counted(tree: Path) -> None:
    (tree / "two\nlines\x1b[31m").write_text("x")
    os.close(os.open(os.fsencode(tree) + b"/bad-\xff", os.O_CREAT | os.O_WRONLY, 0o600))
    listing = list_dir(tree, [])
    assert "two\nlines\x1b[31m" in [e.name for e in listing.entries] and listing.omitted == 1
    assert read(tree, "two\nlines\x1b[31m") == b"x"


def test_a_listing_is_bounded(tree: Path) -> None:
    for i in range(12):
        (tree / f"f{i:02}").write_text("")
    listing = list_dir(tree, [], max_entries=10)
    assert len(listing.entries) == 10 and listing.truncated
    assert not list_dir(tree, [], max_entries=100).truncated


def test_a_huge_sparse_file_is_read_in_bounded_blocks_from_any_offset(tree: Path) -> None:
    with open(tree / "sparse", "wb") as f:
        f.truncate(1 << 40)  # a TiB of nothing
        f.seek((1 << 40) - 3)
        f.write(b"end")
    opened = open_file(tree, ["sparse"])
    assert opened.size == (1 << 40) + 0
    blocks = opened.chunks(opened.size - 10, opened.size, block=4)
    assert [len(b) for b in blocks] == [4, 4, 2]  # never more than a block at a time
    assert opened.fd == -1  # closed once read


def test_a_name_too_long_for_the_file_system_is_refused_not_an_error(tree: Path) -> None:
    for path in ("x" * 300, f"{'x' * 300}/y", f"out/{'x' * 300}"):
        with pytest.raises(Refused, match="cannot be read"):
            read(tree, path)
        with pytest.raises(Refused, match="cannot be read"):
            list_dir(tree, split_path(path))


def _open_fds() -> list[str]:
    """Where each of this process's open descriptors points (one closed meanwhile is skipped)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return targets


def test_a_walk_lets_go_of_every_folder_it_passed_and_a_path_is_bounded_in_depth(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a"] * 40)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    for _ in range(5):
        list_dir(tmp_path, ["a"] * 40)
        assert read(tmp_path, "/".join(["a"] * 40 + ["f"])) == b"x"
    # No descriptor left open on the tree: the process's count is no measure, since another
    # test's thread in this worker may open or close one meanwhile (CI saw 15 before, 14 after).
    assert not [fd for fd in _open_fds() if fd.startswith(str(tmp_path))]
    with pytest.raises(BadPath, match="more than 128 folders deep"):
        split_path("/".join(["a"] * 129))
