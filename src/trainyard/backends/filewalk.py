"""Reading a job's files for its owner: listing a folder and opening a file under a job's
directory or a task's working directory, where every name is the task's to choose.

On a root install the tasks run as per-user accounts and these trees are theirs, while the
server reads them as root. So a task may have put anything there: symlinks (to
``/etc/shadow``, another job's directory, the server's secrets), hard links, FIFOs (a read
blocks forever), device files, huge sparse files, names with newlines, and it may swap a
folder or a file for a symlink between a check and an open. Hence:

- the request path is a list of plain names: no ``..``, ``.``, empty or absolute parts, no
  NUL (``split_path``);
- the walk opens each folder relative to the one before it (``dir_fd``) with
  ``O_NOFOLLOW | O_DIRECTORY``: a symlink anywhere on the way is refused by the kernel, not
  by a check that a swap could outrun. Only the root (the job's directory, the task's
  working directory) is opened by its full path: the folders above it are the server's
  (``backends/local``, ``backends/slurm``), and it is opened with ``O_NOFOLLOW`` too;
- the file is opened with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`` (a FIFO swapped in after
  the look cannot block the open) and ``fstat``-ed: only a regular file with one link is
  read; ``lstat`` first, so that a device or FIFO that is there all along is never opened;
- a file with more than one hard link is refused. With ``fs.protected_hardlinks = 1``
  (Debian's and every mainstream distribution's default) a task cannot link a file it
  could not read or write itself, but the server does not rely on that setting: a job's
  results are its own files, and a link count above one is the one sign that a name in
  the tree may stand for a file made elsewhere;
- a listing reads at most ``MAX_ENTRIES`` names, shows a symlink as a link with its text
  (never followed), and leaves out names that are not UTF-8 (counted).

Reading as root with these rules, rather than as the task's account (``setfsuid`` in a
thread, or a helper process per request), keeps one code path for every backend and
install (the server's own account, ``run_as``, per-user accounts), costs no process per
read, and needs no per-thread credential change inside a thread pool shared with other
requests; the rules above leave the task nothing to point the server's reads at but its
own plain files.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_ENTRIES = 1000  # names read from one folder for a listing
MAX_PATH_CHARS = 4096
MAX_DEPTH = 128  # folders below the directory a path may name
READ_BYTES = 256 << 10  # one read of a download

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class BadPath(ValueError):
    """The request path is not a plain relative path; the message says what to send."""


class NotThere(LookupError):
    """Nothing by that name (or the root itself is missing)."""


class Refused(Exception):
    """The name is there but is not something the server reads: a symlink on the way, a
    folder where a file is wanted, a FIFO, a device, a hard-linked file."""


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "file", "dir", "link" or "other" (FIFO, socket, device)
    size: int  # bytes (a file's apparent size; 0 for what is not a file)
    modified: float  # seconds since the epoch
    target: str | None = None  # a link's text, as written (never followed)


@dataclass(frozen=True)
class Listing:
    entries: list[Entry]
    truncated: bool  # the folder holds more than MAX_ENTRIES names
    omitted: int  # names left out: not UTF-8


@dataclass
class OpenFile:
    """A regular file opened for reading: its descriptor, size and modification time."""

    fd: int
    size: int
    modified: float

    def chunks(self, start: int, end: int, block: int = READ_BYTES) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` (exclusive), a block at a time; the descriptor is closed
        at the end (or when the iterator is closed). A file that shrank meanwhile ends early."""
        try:
            offset = start
            while offset < end:
                data = os.pread(self.fd, min(block, end - offset), offset)
                if not data:
                    return
                yield data
                offset += len(data)
        finally:
            self.close()

    def read(self, limit: int) -> bytes:
        """At most ``limit`` bytes from the start (a preview); the descriptor stays open."""
        return os.pread(self.fd, min(limit, self.size), 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def split_path(path: str) -> list[str]:
    """The names of a relative path (``""``: the root itself); BadPath saying why not."""
    if "\0" in path:
        raise BadPath("the path holds a NUL character, which no file name can")
    if len(path) > MAX_PATH_CHARS:
        raise BadPath(f"the path is longer than {MAX_PATH_CHARS} characters")
    if path.startswith("/"):
        raise BadPath("the path is absolute: give it relative to the directory (e.g. `out/result.json`)")
    parts = path.split("/") if path else []
    for part in parts[:-1] if parts and parts[-1] == "" else parts:  # one trailing slash is fine
        if part in ("", ".", ".."):
            raise BadPath(f"the path has a {part or 'empty'!r} part: give plain names separated by single "
                          "slashes, from the directory down (no `..`, no `.`)")
    names = [p for p in parts if p]
    if len(names) > MAX_DEPTH:
        raise BadPath(f"the path is more than {MAX_DEPTH} folders deep")
    return names


def open_root(root: Path) -> int:
    """The root folder's descriptor; NotThere when it is missing, Refused when it is not a
    plain folder."""
    try:
        return os.open(root, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError) as exc:
        if isinstance(exc, NotADirectoryError) or _is_link(root):
            raise Refused("not a plain folder") from exc
        raise NotThere(str(root)) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("is a symbolic link, which is not followed") from exc
        raise Refused(f"cannot be read: {exc.strerror}") from exc


def open_dir(root: Path, names: list[str]) -> int:
    """A descriptor of the folder ``names`` below ``root``, opened a name at a time, never
    through a symlink."""
    fd = open_root(root)
    try:
        for i, name in enumerate(names):
            child = _step(fd, name, "/".join(names[: i + 1]))
            os.close(fd)  # each folder's descriptor is let go once its child is open
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_dir(root: Path, names: list[str], max_entries: int = MAX_ENTRIES) -> Listing:
    """The folder ``names`` below ``root``: up to ``max_entries`` entries, sorted by name."""
    fd = open_dir(root, names)
    try:
        return _listing(fd, max_entries)
    except PermissionError as exc:  # a server that is not root, at a folder a task made unreadable
        raise Refused(f"{'/'.join(names) or 'the directory'} cannot be read: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _listing(fd: int, max_entries: int) -> Listing:
    entries: list[Entry] = []
    omitted, truncated = 0, False
    with os.scandir(fd) as found:
        for item in found:
            if len(entries) + omitted >= max_entries:
                truncated = True
                break
            if not _utf8(item.name):
                omitted += 1
                continue
            try:
                info = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we looked
            entries.append(_entry(fd, item.name, info))
    return Listing(sorted(entries, key=lambda e: e.name), truncated, omitted)


def open_file(root: Path, names: list[str]) -> OpenFile:
    """The regular file ``names`` below ``root``, opened for reading (see the module's rules)."""
    if not names:
        raise Refused("is a folder: list it, or download it whole with yard cp -r")
    shown = "/".join(names)
    parent = open_dir(root, names[:-1])
    try:
        name = names[-1]
        try:
            seen = _lstat_at(parent, name)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise NotThere(shown) from exc
        except OSError as exc:  # a name too long for the file system
            raise Refused(f"{shown} cannot be read: {exc.strerror}") from exc
        _check_kind(seen, shown)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except FileNotFoundError as exc:
            raise NotThere(shown) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"{shown} is a symbolic link, which is not followed") from exc
            raise Refused(f"{shown} cannot be read: {exc.strerror}") from exc
    finally:
        os.close(parent)
    info = os.fstat(fd)
    try:
        _check_kind(info, shown)  # what was opened, whatever the look saw
    except Refused:
        os.close(fd)
        raise
    return OpenFile(fd, info.st_size, info.st_mtime)


def _step(fd: int, name: str, shown: str) -> int:
    """The folder ``name`` in the folder ``fd``, opened without following a symlink."""
    try:
        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError as exc:
        raise NotThere(shown) from exc
    except NotADirectoryError as exc:  # also a symlink's answer, with O_DIRECTORY (the message only tells them apart)
        try:
            link = stat.S_ISLNK(_lstat_at(fd, name).st_mode)
        except OSError:
            link = False
        why = "is a symbolic link, which is not followed" if link else "is not a folder"
        raise Refused(f"{shown} {why}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{shown} is a symbolic link, which is not followed") from exc
        raise Refused(f"{shown} cannot be read: {exc.strerror}") from exc  # unreadable, a name too long
    return child


def _lstat_at(parent: int, name: str) -> os.stat_result:
    return os.stat(name, dir_fd=parent, follow_symlinks=False)


def _check_kind(info: os.stat_result, shown: str) -> None:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        raise Refused(f"{shown} is a symbolic link, which is not followed: download what it points to by its own "
                      "path in the job's directories")
    if stat.S_ISDIR(mode):
        raise Refused(f"{shown} is a folder: list it, or download it whole with yard cp -r")
    if not stat.S_ISREG(mode):
        raise Refused(f"{shown} is not a regular file (a FIFO, socket or device), which is not read")
    if info.st_nlink > 1:
        raise Refused(f"{shown} has {info.st_nlink} hard links, and only a file with one is read: have the job "
                      "copy it (`cp`) rather than link it")


def _entry(parent: int, name: str, info: os.stat_result) -> Entry:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            target = ""
        return Entry(name, "link", 0, info.st_mtime, target.encode("utf-8", "replace").decode("utf-8"))
    kind = "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
    return Entry(name, kind, info.st_size if kind == "file" else 0, info.st_mtime)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
