"""Fetching a dataset into a folder of a node's cache (``datacache``), as root, the source
held hostile: an http(s) URL (a tar archive, plain, gzip, bzip2 or xz, unpacked as folders and
regular files under names ``core.workdirs.check_name`` accepts, never a link, device or
FIFO; any other file kept as it is; its SHA-256 checked when registered), or a storage's
folder walked from the storage's root without following a link at any step.

A URL is fetched only from addresses no user should reach through root's hands (``refusal``):
never loopback, link-local (cloud metadata), unspecified or multicast, nor one of this node's
own addresses (the server's API, its database), checked at every connection, redirect
included, on the address actually connected to (a name that resolves elsewhere at fetch than
at registration gains nothing), unless the admin allowed its host by name
(``dataset_allowed_hosts``); no proxy from the environment is used. A fetch ends after
``timeout`` seconds in all (``dataset_fetch_timeout_s``), however slowly its source trickles.

Standard library only (and ``core.workdirs``), like ``datacache``, which imports it only on
a miss: a task that finds its datasets cached does not pay for tarfile and urllib.
"""

from __future__ import annotations

import functools
import hashlib
import http
import http.client
import os
import socket
import stat
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainyard.backends.datacache import DEFAULT_FETCH_TIMEOUT_SECONDS
from trainyard.core.addresses import host_name, refusal
from trainyard.core.workdirs import WorkdirError, check_name

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
CHUNK = 1 << 20
HTTP_TIMEOUT_SECONDS = 60.0
MAX_FILES = 10_000_000  # files and folders (each an inode)
DISK_CHECK_BYTES = 64 << 20  # how often a fetch looks at the disk's free space
DISK_RESERVE_BYTES = 1 << 30  # or 5% of the disk, whichever is less: never filled by a fetch
PROGRESS_SECONDS = 10.0  # how often a fetch under way says how far it is, in the task's log
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class FetchError(RuntimeError):
    """A dataset could not be fetched: the source's fault or the cache's, said for the task's log.
    ``transient``: it may pass (a source that is down or slow, a connection cut, a full disk
    on this node), so the task is retried as a platform fault rather than failed: a source
    that answers 404, a dataset too big or changed, a refused address fail the same way again."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class Limit:
    """Bytes and files a fetch may still write, and until when: a dataset bigger than the
    cache, or one whose source takes longer than ``timeout`` seconds, is refused."""

    def __init__(self, max_bytes: int, timeout: float = DEFAULT_FETCH_TIMEOUT_SECONDS,
                 allowed_hosts: Iterable[str] = ()) -> None:
        self.max_bytes, self.bytes, self.files, self.folders = max_bytes, 0, 0, 0
        self.left_out = 0  # a storage folder's entries its reader may not read (not copied)
        self.read = 0  # bytes read from the source (an archive's, compressed; ``bytes``: as unpacked)
        self.timeout, self.deadline = timeout, time.monotonic() + timeout
        self.allowed_hosts = frozenset(map(host_name, allowed_hosts))
        self.disk: Path | None = None  # the folder fetched into, whose disk must keep room
        # Called with the bytes fetched so far, every ``_every`` bytes: the cache evicts what
        # it must to hold them within its capacity while the fetch goes on, not only after.
        self.make_room: Callable[[int], object] | None = None
        # Told "N MiB of M" (of the size ``expect`` learnt, if any) every PROGRESS_SECONDS, for the task's log.
        self.progress: Callable[[str], object] = lambda _: None
        self.expected: int | None = None
        self._said_at = time.monotonic()
        self._checked_at, self._every = 0, max(1, min(DISK_CHECK_BYTES, max_bytes // 16))

    def expect(self, size: int, what: str) -> None:
        """The dataset's size, known before its first byte is written (``what``: how it is
        known): one bigger than the whole cache is refused before anything is evicted for it;
        else room for it is made once, now."""
        if size > self.max_bytes:
            raise FetchError(f"the dataset is bigger than this node's cache: {what} is {size} bytes, the cache "
                             f"{self.max_bytes} (setting dataset_cache_gb); nothing was evicted for it")
        self.expected = size
        if self.make_room is not None:
            self.make_room(size)

    def add(self, size: int, *, file: bool = False, folder: bool = False) -> None:
        self.bytes += size
        self.files += file
        self.folders += folder
        if self.bytes > self.max_bytes:
            raise FetchError(f"the dataset is bigger than this node's cache ({self.max_bytes} bytes, setting "
                             "dataset_cache_gb)")
        if self.files + self.folders > MAX_FILES:
            raise FetchError(f"the dataset holds more than {MAX_FILES} files and folders")
        if self.bytes - self._checked_at >= self._every:
            self._checked_at = self.bytes
            if self.make_room is not None:
                self.make_room(self.bytes)
            if self.disk is not None:
                self.check_disk(self.disk)
            if time.monotonic() - self._said_at >= PROGRESS_SECONDS:
                self._said_at = time.monotonic()
                # A URL's bytes as read (its Content-Length's), a folder's as copied (its files' sizes).
                done = self.read or self.bytes
                of = "" if self.expected is None else f" of {self.expected / (1 << 20):.1f}"
                self.progress(f"{done / (1 << 20):.1f} MiB{of} fetched")
        self.check_time()

    @staticmethod
    def check_disk(path: Path) -> None:
        """Refuse to go on when the disk under ``path`` is nearly full (other fetches, other
        files): the cache's capacity is the admin's guess, the disk's free space a fact."""
        disk = os.statvfs(path)
        reserve = min(DISK_RESERVE_BYTES, disk.f_blocks * disk.f_frsize // 20)
        if disk.f_bavail * disk.f_frsize < reserve:
            raise FetchError(f"this node's disk under {path} is nearly full ({disk.f_bavail * disk.f_frsize} bytes "
                             "free): the dataset is not fetched; lower dataset_cache_gb or free the disk",
                             transient=True)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise FetchError(f"the fetch took longer than {self.timeout:g} s (setting dataset_fetch_timeout_s)",
                             transient=True)

    def left(self) -> float:
        """Seconds a socket may wait for one step: the rest of the fetch's time, at most a minute."""
        return max(0.001, min(HTTP_TIMEOUT_SECONDS, self.deadline - time.monotonic()))


def fetch(item: dict[str, Any], into: Path, limit: Limit) -> tuple[int, int]:
    """Fetch ``item``'s files into the empty folder ``into``: (bytes, files)."""
    limit.disk = into
    limit.check_disk(into)
    source = str(item["source"])
    if source.startswith(("http://", "https://")):
        return _fetch_url(source, str(item.get("sha256") or ""), into, limit)
    if not source.startswith("/") or not item.get("storage_root"):
        raise FetchError(f"dataset {item['name']}: a source must be an http(s) URL or a storage's folder")
    reader = item.get("reader")
    return _copy_folder(str(item["storage_root"]), source, into, limit,
                        None if reader is None else (int(reader[0]), frozenset(map(int, reader[1]))))


# -- where root may connect ------------------------------------------------------------------


def _connect(address: tuple[str, int], timeout: Any = None, source_address: Any = None, *,
             limit: Limit) -> socket.socket:
    """``socket.create_connection`` to an address ``refusal`` lets through: resolved once,
    each address checked, and the connection made to the address checked."""
    host, port = address
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise FetchError(f"cannot resolve {host}: {exc}", transient=exc.errno == socket.EAI_AGAIN) from exc
    allowed = host_name(host) in limit.allowed_hosts
    problem: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        if not allowed and (why := refusal(str(sockaddr[0]))) is not None:
            raise FetchError(f"the dataset's source {host} is at {sockaddr[0]}: {why}; a dataset is never fetched "
                             "from there unless an admin lists the host in the setting dataset_allowed_hosts")
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(limit.left())
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            problem = exc
    raise problem or OSError(f"cannot connect to {host}")


class _GuardedHTTP(urllib.request.HTTPHandler):
    def __init__(self, limit: Limit) -> None:
        super().__init__()
        self.limit = limit

    def http_open(self, req: Any) -> Any:
        return self.do_open(functools.partial(_guarded, http.client.HTTPConnection, self.limit), req)


class _GuardedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, limit: Limit) -> None:
        super().__init__()
        self.limit = limit

    def https_open(self, req: Any) -> Any:
        return self.do_open(functools.partial(_guarded, http.client.HTTPSConnection, self.limit), req,
                            context=self._context)  # type: ignore[attr-defined]


def _guarded(kind: type[http.client.HTTPConnection], limit: Limit, *args: Any,
             **kwargs: Any) -> http.client.HTTPConnection:
    """A connection whose socket ``_connect`` makes (http.client's hook for it)."""
    connection = kind(*args, **kwargs)
    connection._create_connection = functools.partial(_connect, limit=limit)  # type: ignore[attr-defined]
    return connection


class _NoOtherSchemes(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only (never file: or ftp:, which root would read); the host a
    redirect names is checked when it is connected to, as the first."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if not newurl.startswith(("http://", "https://")):
            raise FetchError(f"the source redirects to {newurl[:200]!r}: only http(s) is followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Hashing:
    """A stream that hashes what is read from it, one socket read at a time, each within
    the fetch's time (``Limit``): a source that trickles cannot hold the fetch for ever."""

    def __init__(self, inner: Any, limit: Limit) -> None:
        self.inner, self.digest, self.limit = inner, hashlib.sha256(), limit

    def read(self, size: int = -1) -> bytes:
        size = CHUNK if size is None or size < 0 else size
        pieces, got = [], 0
        while got < size:
            self.limit.check_time()
            piece = self.inner.read1(size - got)
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        data = b"".join(pieces)
        self.digest.update(data)
        self.limit.read += len(data)
        return data


def _fetch_url(url: str, sha256: str, into: Path, limit: Limit) -> tuple[int, int]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _GuardedHTTP(limit), _GuardedHTTPS(limit),
                                         _NoOtherSchemes)
    path = url.split("?", 1)[0].split("#", 1)[0]  # also what is said of it: a pre-signed query is a credential
    try:
        with opener.open(urllib.request.Request(url, headers={"User-Agent": "trainyard-datacache"}),
                         timeout=limit.left()) as response:
            length = str(response.headers.get("Content-Length") or "")
            if length.isdigit():  # an archive's compressed size: its files are rarely smaller
                limit.expect(int(length), f"{path} (its Content-Length)")
            stream = _Hashing(response, limit)
            if path.endswith(ARCHIVE_SUFFIXES):
                _unpack(stream, into, limit)
            else:
                name = path.rstrip("/").rsplit("/", 1)[-1] or "data"
                _write_file(into, _name(name), stream, limit)
            while stream.read(CHUNK):  # the rest (a tar's trailing blocks) counts in the hash
                pass
            if length.isdigit() and limit.read != int(length):  # a plain file's end is no proof it is whole
                raise FetchError(f"could not fetch {path}: the connection ended after {limit.read} of its "
                                 f"{length} bytes", transient=True)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"could not fetch {path}: HTTP {exc.code} {_phrase(exc.code)}",
                         transient=exc.code >= 500 or exc.code in (408, 429)) from None
    except (OSError, EOFError) as exc:  # refused, reset, timed out, cut short: the source may be back
        raise FetchError(f"could not fetch {path}: {exc}", transient=True) from exc
    except tarfile.TarError as exc:
        raise FetchError(f"could not fetch {path}: {exc}") from exc
    if sha256 and stream.digest.hexdigest() != sha256:
        raise FetchError(f"{path} has sha256 {stream.digest.hexdigest()}, not the registered {sha256}: its content "
                         "changed; register the dataset again with its new version")
    return limit.bytes, limit.files


def _phrase(code: int) -> str:
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "(a status HTTP does not define)"


def _name(name: str) -> str:
    try:
        return check_name(name)
    except WorkdirError as exc:
        raise FetchError(f"a name in the dataset cannot be kept: {exc}") from None


def _unpack(stream: Any, into: Path, limit: Limit) -> None:
    """A tar stream (plain, gzip, bzip2 or xz) as folders and files under ``into``: nothing else."""
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for info in tar:
            relative = info.name
            while relative.startswith("./"):
                relative = relative[2:]
            if relative in ("", "."):
                continue
            name = _name(relative)
            if info.isdir():
                _make_folders(into, name, limit)
            elif info.isreg() and not info.issparse():
                member = tar.extractfile(info)
                assert member is not None
                _write_file(into, name, member, limit, executable=bool(info.mode & stat.S_IXUSR))
            else:
                kind = "a link" if info.issym() or info.islnk() else "a device, FIFO or sparse file"
                raise FetchError(f"{name!r} in the archive is {kind}; a dataset holds folders and files only")


def _make_folders(into: Path, name: str, limit: Limit | None = None) -> None:
    """Folders inside ``into`` (which holds only what this fetch made: folders and files)."""
    here = into
    for part in name.split("/"):
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise FetchError(f"{name!r}: below a file of the same name")
        if not here.exists():
            if limit is not None:
                limit.add(0, folder=True)  # an inode too: an archive of empty folders is bounded
            os.mkdir(here, 0o755)


def _write_file(into: Path, name: str, stream: Any, limit: Limit, *, executable: bool = False) -> None:
    parent, _, base = name.rpartition("/")
    if parent:
        _make_folders(into, parent, limit)
    limit.add(0, file=True)
    try:
        fd = os.open(into / name, _NEW_FILE, 0o755 if executable else 0o644)
    except FileExistsError:
        raise FetchError(f"{name!r} twice in the dataset") from None
    with os.fdopen(fd, "wb") as out:
        while chunk := stream.read(CHUNK):
            limit.add(len(chunk))
            out.write(chunk)
    os.chmod(into / name, 0o755 if executable else 0o644)  # past the umask


Reader = tuple[int, frozenset[int]]  # the (uid, groups) whose permissions a copy honours


def _may(info: os.stat_result, reader: Reader | None, bits: int) -> bool:
    """Whether ``reader`` may do ``bits`` (4 read, 1 search, 5 both) to a file of ``info``,
    by its mode as the kernel checks it (the owner's, else the group's, else the others'
    bits; an ACL that grants more is not honoured: what it shares is left out)."""
    if reader is None or reader[0] == 0:
        return True
    uid, groups = reader
    shift = 6 if info.st_uid == uid else 3 if info.st_gid in groups else 0
    return (info.st_mode >> shift) & bits == bits


def _copy_folder(root: str, source: str, into: Path, limit: Limit, reader: Reader | None = None) -> tuple[int, int]:
    """A storage's folder, copied from ``root`` (the storage's own path, the admin's) down,
    never through a link, and only what ``reader`` (the account of the dataset's owner's
    tasks) could read itself: what a user put in the storage cannot lead root elsewhere,
    and another user's private folder in a shared storage stays theirs."""
    if source != root and not source.startswith(root.rstrip("/") + "/"):
        raise FetchError(f"{source} is not inside its storage {root}")
    if reader is not None and reader[0] < 0:
        raise FetchError(f"{source}: the dataset's owner has no task account here whose permissions a copy could "
                         "honour")
    try:
        fd = os.open(root, _DIR_FLAGS)
        for part in [p for p in source[len(root):].split("/") if p]:
            step = os.open(part, _DIR_FLAGS, dir_fd=fd) if _may(os.fstat(fd), reader, 1) else -1
            os.close(fd)
            fd = step
            if fd < 0:
                raise FetchError(f"the dataset's owner may not reach {source} (its folders' permissions)")
        if not _may(os.fstat(fd), reader, 5):
            os.close(fd)
            raise FetchError(f"the dataset's owner may not read the folder {source} (its permissions)")
    except OSError as exc:
        raise FetchError(f"cannot open the dataset's folder {source} (without following links): {exc}") from exc
    try:
        # Walked first, copying nothing: a folder bigger than the cache evicts nothing.
        limit.expect(_copy_tree(fd, None, "", limit, reader), f"{source} (its files' sizes)")
        _copy_tree(fd, into, "", limit, reader)
    finally:
        os.close(fd)
    limit.read = limit.bytes  # a folder's files are read as they are copied
    return limit.bytes, limit.files


def _copy_tree(fd: int, into: Path | None, prefix: str, limit: Limit, reader: Reader | None = None) -> int:
    """Copy the folder ``fd`` into ``into`` (None: only measure it); what ``reader`` may not
    read is left out and counted (``limit.left_out``). The readable files' bytes, as stat
    says them, when measuring; 0 when copying (``limit`` counts those)."""
    measured = 0
    for name in sorted(os.listdir(fd)):
        shown = f"{prefix}{name}"
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not _may(info, reader, 5 if stat.S_ISDIR(info.st_mode) else 4):
            limit.left_out += into is not None  # the owner's account could not read it: left out, like a link
            continue
        if stat.S_ISDIR(info.st_mode):
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                if not _may(os.fstat(child), reader, 5):  # another folder swapped in since the stat
                    limit.left_out += into is not None
                    continue
                if into is not None:
                    _make_folders(into, _name(shown), limit)
                measured += _copy_tree(child, into, shown + "/", limit, reader)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode) and into is None:
            measured += info.st_size
        elif stat.S_ISREG(info.st_mode) and into is not None:
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
            with os.fdopen(file_fd, "rb") as source:
                opened = os.fstat(file_fd)
                if not stat.S_ISREG(opened.st_mode) or not _may(opened, reader, 4):  # swapped since the stat
                    limit.left_out += 1
                    continue
                os.set_blocking(file_fd, True)
                _write_file(into, _name(shown), source, limit, executable=bool(info.st_mode & stat.S_IXUSR))
        # Links, devices, FIFOs and sockets are left out: a dataset is folders and files.
    return measured
