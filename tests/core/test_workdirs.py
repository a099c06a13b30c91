"""A working directory's archive: hostile uploads are refused by name, never extracted, and
the canonical form (and so the content hash) depends on the content alone."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from trainyard.core.workdirs import Entry, WorkdirError, canonical, read_archive


def archive(*members: tuple[tarfile.TarInfo, bytes | None], compress: bool = True) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if compress else "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out.seek(0)
    return out


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "",
           mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        return info, data
    return info, None


def test_a_folder_of_files_dirs_and_inner_links_becomes_canonical_and_its_hash_ignores_times_and_order() -> None:
    first = archive(member("train.py", data=b"print(1)\n", mode=0o775), member("pkg/", tarfile.DIRTYPE),
                    member("pkg/m.py", data=b"x"), member("pkg/alias.py", tarfile.SYMTYPE, link="m.py"))
    got = read_archive(first, max_bytes=1 << 20)
    assert (got.files, got.size) == (2, 10)
    names = tarfile.open(fileobj=io.BytesIO(got.tar))
    assert [(m.name, m.mode, m.uid, m.uname) for m in names] == [
        ("pkg", 0o755, 0, ""), ("pkg/alias.py", 0o777, 0, ""), ("pkg/m.py", 0o644, 0, ""), ("train.py", 0o755, 0, "")]
    again = canonical([Entry("pkg/m.py", b"x"), Entry("train.py", b"print(1)\n", executable=True),
                       Entry("pkg/alias.py", target="m.py")], max_bytes=1 << 20)
    assert again.digest == got.digest and again.digest.startswith("sha256:")
    assert read_archive(io.BytesIO(got.gzipped()), max_bytes=1 << 20).digest == got.digest  # idempotent


@pytest.mark.parametrize(("members", "says"), [
    ([member("/etc/cron.d/x", data=b"x")], "absolute"),
    ([member("../../root/.ssh/authorized_keys", data=b"x")], "'..'"),
    ([member("a/./b", data=b"x")], "'.'"),
    ([member("a\nb", data=b"x")], "control character"),
    ([member("shadow", tarfile.SYMTYPE, link="/etc/shadow")], "outside the working directory"),
    ([member("up", tarfile.SYMTYPE, link="../../etc")], "leaves the working directory"),
    ([member("deep/up", tarfile.SYMTYPE, link="../../x")], "leaves the working directory"),
    ([member("here", tarfile.SYMTYPE, link="."), member("here/evil", data=b"x")], "not a folder"),
    ([member("f", data=b"x"), member("hard", tarfile.LNKTYPE, link="f")], "hard link"),
    ([member("null", tarfile.CHRTYPE)], "device, FIFO"),
    ([member("fifo", tarfile.FIFOTYPE)], "device, FIFO"),
    ([member("twice", data=b"a"), member("twice", data=b"b")], "the same name twice"),
    ([member("f", data=b"x"), member("f/inner", data=b"y")], "not a folder"),
])
def test_hostile_members_are_refused_by_name(members: list[tuple[tarfile.TarInfo, bytes | None]],
                                             says: str) -> None:
    with pytest.raises(WorkdirError, match=says):
        read_archive(archive(*members), max_bytes=1 << 20)


def test_a_gzip_bomb_stops_at_the_limit_and_too_many_members_at_theirs() -> None:
    bomb = io.BytesIO(gzip.compress(archive(member("zeros", data=bytes(8 << 20)), compress=False).getvalue()))
    assert len(bomb.getvalue()) < 64 << 10
    with pytest.raises(WorkdirError, match="limit of 1048576 bytes"):
        read_archive(bomb, max_bytes=1 << 20)
    many = archive(*(member(f"f{i}", data=b"") for i in range(11)))
    with pytest.raises(WorkdirError, match="more than 10 files"):
        read_archive(many, max_bytes=1 << 20, max_files=10)


def test_too_big_names_the_biggest_files_and_garbage_is_not_an_archive() -> None:
    with pytest.raises(WorkdirError) as caught:
        canonical([Entry("small", b"x"), Entry("model.pt", bytes(300)), Entry("data.bin", bytes(200))],
                  max_bytes=256)
    assert caught.value.biggest[:2] == (("model.pt", 300), ("data.bin", 200))
    assert "model.pt (300 B)" in str(caught.value)
    with pytest.raises(WorkdirError, match="not a readable tar archive"):
        read_archive(io.BytesIO(b"PK\x03\x04 a zip, not a tar"), max_bytes=1 << 20)


def _declared_header(kind: bytes, size: int) -> bytes:
    """A tar header of type ``kind`` declaring ``size`` bytes to follow (that never do)."""
    info = tarfile.TarInfo("././@PaxHeader" if kind == tarfile.XHDTYPE else "././@LongLink")
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_an_extended_header_declaring_a_gigabyte_is_refused_before_it_is_read(kind: bytes) -> None:
    # A few kilobytes of gzip that tar would have read into memory whole, at the size declared.
    bomb = gzip.compress(_declared_header(kind, 1 << 30) + bytes(1 << 20))
    with pytest.raises(WorkdirError, match="extended tar header of 1073741824 bytes"):
        read_archive(io.BytesIO(bomb), max_bytes=1 << 20)


def test_sparse_files_bzip2_and_long_link_targets_are_refused() -> None:
    sparse = tarfile.TarInfo("holes")
    sparse.type = tarfile.GNUTYPE_SPARSE
    with pytest.raises(WorkdirError, match="sparse"):
        read_archive(io.BytesIO(gzip.compress(sparse.tobuf(format=tarfile.GNU_FORMAT) + bytes(1024))),
                     max_bytes=1 << 20)
    plain = archive(member("f", data=b"x"), compress=False).getvalue()
    import bz2

    with pytest.raises(WorkdirError, match="not a readable tar archive"):
        read_archive(io.BytesIO(bz2.compress(plain)), max_bytes=1 << 20)
    assert read_archive(io.BytesIO(plain), max_bytes=1 << 20).files == 1  # a plain tar is taken
    with pytest.raises(WorkdirError, match="longer than 4095 bytes"):
        canonical([Entry("l", target="a/" * 3000)], max_bytes=1 << 20)


@pytest.mark.parametrize(("links", "says"), [
    ({"lnk": ".", "esc": "lnk/.."}, "leaves the working directory through"),
    ({"d/lnk": "..", "d/esc": "lnk/.."}, "leaves the working directory through"),
    ({"a": "b", "b": "a"}, "a loop of symlinks"),
])
def test_links_that_leave_through_other_links_or_loop_are_refused(links: dict[str, str], says: str) -> None:
    with pytest.raises(WorkdirError, match=says):
        canonical([Entry(name, target=target) for name, target in links.items()], max_bytes=1 << 20)
    assert canonical([Entry("lnk", target="."), Entry("ok", target="lnk/x")], max_bytes=1 << 20).files == 0


def test_tars_own_dot_slash_names_are_the_folders_own() -> None:
    # `tar czf project.tar.gz -C project .`, as the portal's hint says to make one.
    dotted = archive(member("./", tarfile.DIRTYPE), member("./train.py", data=b"x"), member("./pkg/", tarfile.DIRTYPE),
                     member("./pkg/m.py", data=b"y"))
    plain = canonical([Entry("train.py", b"x"), Entry("pkg/m.py", b"y")], max_bytes=1 << 20)
    assert read_archive(dotted, max_bytes=1 << 20).digest == plain.digest
    with pytest.raises(WorkdirError, match="'..'"):
        read_archive(archive(member("./../x", data=b"x")), max_bytes=1 << 20)


def test_git_archives_global_header_is_read_as_a_header_not_a_member() -> None:
    # `git archive --format=tar.gz -o project.tar.gz HEAD`, as the portal's hint says for a git
    # project, begins with a `pax_global_header` (the commit's id): it names no file.
    comment = b"52 comment=" + b"0" * 40 + b"\n"
    header = tarfile.TarInfo("pax_global_header")
    header.type, header.size = tarfile.XGLTYPE, len(comment)
    from_git = archive((header, comment), member("train.py", data=b"x"), member("pkg/", tarfile.DIRTYPE),
                       member("pkg/m.py", data=b"y"))
    plain = canonical([Entry("train.py", b"x"), Entry("pkg/m.py", b"y")], max_bytes=1 << 20)
    assert read_archive(from_git, max_bytes=1 << 20).digest == plain.digest
