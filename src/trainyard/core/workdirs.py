"""A job's working directory as it travels: one safe, canonical tar archive, and its hash.

``yard submit`` packs a project folder (``client_workdir``) and the server checks what it
receives with the same code (``canonical``): the server never extracts an upload, it reads
it member by member and writes it anew, so that what is stored, and later unpacked in a
task's working directory, holds only

* folders and regular files under relative names: no absolute name, no ``..``, no empty
  or ``.`` part, no control character, no name twice, nothing below a symlink;
* symlinks whose target stays inside the folder (relative, resolved against the link's own
  folder), never hard links, devices, FIFOs or sockets;
* modes ``0755`` (folders and executables) or ``0644``, owner 0, no user or group names,
  one fixed time, members in name order;

within limits on the number of members, each name's length and the unpacked size (a
gzip bomb stops at the limit, not at the end of the stream). Anything else is a
`WorkdirError` naming the member and what to do. Identical folders give identical bytes,
so the SHA-256 of the canonical (uncompressed) tar names the content: an upload is stored
once per content, and a client that knows the hash may ask before sending.

Standard library only: the CLI and SDK import it too.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import posixpath
import re
import stat
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

# The time every member carries (1980-01-01, the oldest a zip can hold): a folder's hash must
# not change because a checkout touched its files.
FIXED_MTIME = 315532800
MAX_NAME_BYTES = 1024
MAX_LINK_BYTES = 4095  # PATH_MAX less its NUL
MAX_HEADER_BYTES = 64 << 10  # a PAX or GNU long-name header: a long name, never megabytes
PER_MEMBER_BYTES = 4096  # a member's header, an extended header of a long name, padding
MAX_DEPTH = 64
DEFAULT_MAX_FILES = 20_000
HASH_PREFIX = "sha256:"
_HASH = re.compile(r"sha256:[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class WorkdirError(ValueError):
    """An archive (or a folder) that cannot be a job's working directory; ``member`` names the
    first offending name, ``biggest`` the largest files when the limit on size was passed."""

    def __init__(self, message: str, member: str | None = None,
                 biggest: tuple[tuple[str, int], ...] = ()) -> None:
        super().__init__(message)
        self.member = member
        self.biggest = biggest


@dataclass(frozen=True)
class Entry:
    """One member of a working directory: a folder (``data is None and target is None``), a
    file (``data``) or a symlink (``target``)."""

    name: str
    data: bytes | None = None
    target: str | None = None
    executable: bool = False


@dataclass(frozen=True)
class Canonical:
    """A canonical archive: its uncompressed tar bytes and what it holds."""

    tar: bytes
    files: int  # regular files
    size: int  # their bytes
    biggest: tuple[tuple[str, int], ...] = field(default=())

    @property
    def digest(self) -> str:
        return HASH_PREFIX + hashlib.sha256(self.tar).hexdigest()

    def gzipped(self) -> bytes:
        return gzip.compress(self.tar, compresslevel=6, mtime=0)


def size_text(count: int) -> str:
    """A byte count as people read it: ``812 B``, ``4.0 KiB``, ``72.1 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def is_digest(text: str) -> bool:
    return _HASH.fullmatch(text) is not None


def check_name(name: str) -> str:
    """``name`` as a relative POSIX path inside the folder, or `WorkdirError`."""
    shown = name.encode("utf-8", "backslashreplace").decode("utf-8")
    if not name or name.startswith("/"):
        raise WorkdirError(f"{shown!r}: an absolute or empty name; an archive of a working directory holds "
                           "names relative to it", shown)
    if _CONTROL.search(name):
        raise WorkdirError(f"{shown!r}: a name with a control character (NUL, newline, ...); rename the file",
                           shown)
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        raise WorkdirError(f"{shown[:80]!r}...: a name longer than {MAX_NAME_BYTES} bytes", shown[:80])
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise WorkdirError(f"{shown!r}: a name with an empty, '.' or '..' part; an archive of a working "
                           "directory never reaches outside it", shown)
    if len(parts) > MAX_DEPTH:
        raise WorkdirError(f"{shown!r}: nested more than {MAX_DEPTH} folders deep", shown)
    return "/".join(parts)


def check_link(name: str, target: str) -> str:
    """A symlink's target, if it stays inside the folder (relative to the link's folder)."""
    if len(target.encode("utf-8", "surrogateescape")) > MAX_LINK_BYTES:
        raise WorkdirError(f"{name!r}: a symlink whose target is longer than {MAX_LINK_BYTES} bytes", name)
    if not target or target.startswith("/") or _CONTROL.search(target):
        raise WorkdirError(f"{name!r}: a symlink to {target!r}, outside the working directory (absolute or "
                           "empty); copy the file in, or mount what it points to as a storage", name)
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise WorkdirError(f"{name!r}: a symlink to {target!r}, which leaves the working directory; copy the "
                           "file in, or mount what it points to as a storage", name)
    return target


def _stays_inside(name: str, links: dict[str, str]) -> None:
    """Refuse a symlink that leaves the folder through the archive's other symlinks (``a ->
    .`` and ``b -> a/..``), or that never resolves (a loop): each link checked alone cannot
    tell."""
    parts = [*name.split("/")[:-1], *links[name].split("/")]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                raise WorkdirError(f"{name!r}: a symlink that leaves the working directory through the archive's "
                                   "other symlinks", name)
            resolved.pop()
            continue
        resolved.append(part)
        here = "/".join(resolved)
        if here in links:
            hops += 1
            if hops > 40:  # the kernel's own limit on links followed
                raise WorkdirError(f"{name!r}: a loop of symlinks", name)
            resolved.pop()
            parts = [*links[here].split("/"), *parts]


def canonical(entries: Iterable[Entry], *, max_bytes: int, max_files: int = DEFAULT_MAX_FILES) -> Canonical:
    """The canonical archive of ``entries`` (any order; folders implied by names are added),
    or `WorkdirError` for a bad name, a name twice, something below a symlink, or more
    than ``max_files`` members or ``max_bytes`` of file data (naming the biggest files)."""
    members: dict[str, Entry] = {}
    sizes: list[tuple[str, int]] = []
    total = 0
    for entry in entries:
        name = check_name(entry.name)
        if name in members and not (members[name].data is None and members[name].target is None
                                    and entry.data is None and entry.target is None):
            raise WorkdirError(f"{name!r}: the same name twice in the archive", name)
        if entry.target is not None:
            check_link(name, entry.target)
        members[name] = Entry(name, entry.data, entry.target, entry.executable)
        if entry.data is not None:
            sizes.append((name, len(entry.data)))
            total += len(entry.data)
        if len(members) > max_files:
            raise WorkdirError(f"more than {max_files} files and folders; leave generated files out with a "
                               ".yardignore (or .gitignore)")
    biggest = tuple(sorted(sizes, key=lambda s: (-s[1], s[0]))[:5])
    if total > max_bytes:
        raise WorkdirError(f"{size_text(total)} of files, more than this cluster's limit of {size_text(max_bytes)}; "
                           "the biggest: " + ", ".join(f"{n} ({size_text(s)})" for n, s in biggest)
                           + "; leave them out with a .yardignore, or put data in a storage", biggest=biggest)
    for name in list(members):
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            above = members.get(parent)
            if above is None:
                members[parent] = Entry(parent)
            elif above.data is not None or above.target is not None:
                raise WorkdirError(f"{name!r}: below {parent!r}, which is not a folder", name)
    links = {name: entry.target for name, entry in members.items() if entry.target is not None}
    for name in links:
        _stays_inside(name, links)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            _add(tar, members[name])
    return Canonical(out.getvalue(), files=len(sizes), size=total, biggest=biggest)


def _add(tar: tarfile.TarFile, entry: Entry) -> None:
    info = tarfile.TarInfo(entry.name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    if entry.target is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
        tar.addfile(info)
    elif entry.data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    else:
        info.size, info.mode = len(entry.data), 0o755 if entry.executable else 0o644
        tar.addfile(info, io.BytesIO(entry.data))


class _Bounded(io.RawIOBase):
    """A stream that ends the read (`WorkdirError`) past ``limit`` bytes, before reading
    them: tar's headers declare sizes, and a header read whole at its declared size must not
    hold gigabytes that a few kilobytes of gzip (or bzip2) stand for."""

    def __init__(self, inner: IO[bytes], limit: int) -> None:
        super().__init__()
        self.inner, self.limit, self.total = inner, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        left = self.limit - self.total
        if size is None or size < 0 or size > left:
            size = left + 1  # one past the limit says that there is more
        data = self.inner.read(size)
        self.total += len(data)
        if self.total > self.limit:
            raise WorkdirError(f"the archive unpacks to more than {self.limit} bytes (files, headers and "
                               "padding), more than this cluster takes; leave big files out with a .yardignore")
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


class _CheckedInfo(tarfile.TarInfo):
    """A member's header, refused before tar reads what it declares: an extended header
    (PAX, GNU long name or link) over ``MAX_HEADER_BYTES``, and every form of sparse file."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        extended = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                    tarfile.SOLARIS_XHDTYPE)
        if self.type in extended and self.size > MAX_HEADER_BYTES:
            raise WorkdirError(f"an extended tar header of {self.size} bytes, more than {MAX_HEADER_BYTES}; "
                               "pack the folder with `yard submit` or a plain `tar czf`")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _sparse()
        return super()._proc_member(tarfile_)  # type: ignore[misc, no-any-return]

    def _proc_gnusparse_00(self, *args: Any) -> None:
        raise _sparse()

    def _proc_gnusparse_01(self, *args: Any) -> None:
        raise _sparse()

    def _proc_gnusparse_10(self, *args: Any) -> None:
        raise _sparse()


def _sparse() -> WorkdirError:
    return WorkdirError("a sparse file in the archive; a working directory's files are sent whole")


def read_archive(stream: IO[bytes], *, max_bytes: int, max_files: int = DEFAULT_MAX_FILES) -> Canonical:
    """An uploaded archive (a tar, gzip'd or not: nothing else) made canonical, without
    extracting it, reading at most what ``max_bytes`` of files in ``max_files`` members take."""
    return canonical(_members(stream, max_bytes=max_bytes, max_files=max_files),
                     max_bytes=max_bytes, max_files=max_files)


def _opened(stream: IO[bytes], limit: int) -> IO[bytes]:
    """The archive's tar bytes, bounded: gunzipped when it is gzip's, as it is otherwise."""
    head = stream.read(2)
    stream.seek(0)
    inner = cast(IO[bytes], gzip.GzipFile(fileobj=stream, mode="rb")) if head == b"\x1f\x8b" else stream
    return io.BufferedReader(_Bounded(inner, limit), buffer_size=64 << 10)


def _members(stream: IO[bytes], *, max_bytes: int, max_files: int) -> Iterator[Entry]:
    read = 0
    count = 0
    limit = max_bytes + max_files * PER_MEMBER_BYTES + (1 << 20)
    try:
        with tarfile.open(fileobj=_opened(stream, limit), mode="r|", tarinfo=_CheckedInfo) as tar:
            for info in tar:
                count += 1
                if count > max_files:
                    raise WorkdirError(f"more than {max_files} files and folders; leave generated files out with "
                                       "a .yardignore (or .gitignore)")
                relative = info.name
                while relative.startswith("./"):  # `tar czf p.tgz -C project .` names them so
                    relative = relative[2:]
                if relative in ("", "."):
                    continue  # the folder itself
                name = check_name(relative)
                if info.isdir():
                    yield Entry(name)
                elif info.issym():
                    yield Entry(name, target=info.linkname)
                elif info.isreg():
                    read += info.size
                    if read > max_bytes:
                        raise WorkdirError(f"more than this cluster's limit of {max_bytes} bytes of files (at "
                                           f"{name!r}, {info.size} bytes); leave big files out with a .yardignore, "
                                           "or put data in a storage", name)
                    member = tar.extractfile(info)
                    assert member is not None  # a regular file
                    yield Entry(name, data=member.read(), executable=bool(info.mode & stat.S_IXUSR))
                else:
                    kind = "a hard link" if info.islnk() else "a device, FIFO or other special file"
                    raise WorkdirError(f"{name!r}: {kind}; a working directory holds folders, files and "
                                       "symlinks inside it", name)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        raise WorkdirError(f"not a readable tar archive (plain or gzip'd): {exc}") from None
