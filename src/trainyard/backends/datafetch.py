"""Fetching a dataset into a folder of a node's cache (``datacache``), the source held
hostile: an http(s) URL (a tar archive, plain, gzip, bzip2 or xz, unpacked as folders and
regular files under names ``core.workdirs.check_name`` accepts, never a link, device or
FIFO; any other file kept as it is; its SHA-256 checked when registered), or a storage's
folder walked from the storage's root without following a link at any step.

Standard library only (and ``core.workdirs``), like ``datacache``, which imports it only on
a miss: a task that finds its datasets cached does not pay for tarfile and urllib.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
import urllib.request
from pathlib import Path
from typing import IO, Any

from trainyard.core.workdirs import WorkdirError, check_name

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
CHUNK = 1 << 20
HTTP_TIMEOUT_SECONDS = 60.0
MAX_FILES = 10_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class FetchError(RuntimeError):
    """A dataset could not be fetched: the source's fault or the cache's, said for the task's log."""


class Limit:
    """Bytes and files a fetch may still write: a dataset bigger than the cache is refused."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.bytes, self.files = max_bytes, 0, 0

    def add(self, size: int, *, file: bool = False) -> None:
        self.bytes += size
        self.files += file
        if self.bytes > self.max_bytes:
            raise FetchError(f"the dataset is bigger than this node's cache ({self.max_bytes} bytes, setting "
                             "dataset_cache_gb)")
        if self.files > MAX_FILES:
            raise FetchError(f"the dataset holds more than {MAX_FILES} files")


def fetch(item: dict[str, Any], into: Path, limit: Limit) -> tuple[int, int]:
    """Fetch ``item``'s files into the empty folder ``into``: (bytes, files)."""
    source = str(item["source"])
    if source.startswith(("http://", "https://")):
        return _fetch_url(source, str(item.get("sha256") or ""), into, limit)
    if not source.startswith("/") or not item.get("storage_root"):
        raise FetchError(f"dataset {item['name']}: a source must be an http(s) URL or a storage's folder")
    return _copy_folder(str(item["storage_root"]), source, into, limit)


class _NoOtherSchemes(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only (never file: or ftp:, which root would read)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if not newurl.startswith(("http://", "https://")):
            raise FetchError(f"the source redirects to {newurl[:200]!r}: only http(s) is followed")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Hashing:
    """A stream that hashes what is read from it."""

    def __init__(self, inner: IO[bytes]) -> None:
        self.inner, self.digest = inner, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.digest.update(data)
        return data


def _fetch_url(url: str, sha256: str, into: Path, limit: Limit) -> tuple[int, int]:
    opener = urllib.request.build_opener(_NoOtherSchemes)
    path = url.split("?", 1)[0].split("#", 1)[0]
    try:
        with opener.open(urllib.request.Request(url, headers={"User-Agent": "trainyard-datacache"}),
                         timeout=HTTP_TIMEOUT_SECONDS) as response:
            stream = _Hashing(response)
            if path.endswith(ARCHIVE_SUFFIXES):
                _unpack(stream, into, limit)
            else:
                name = path.rstrip("/").rsplit("/", 1)[-1] or "data"
                _write_file(into, _name(name), stream, limit)
            while stream.read(CHUNK):  # the rest (a tar's trailing blocks) counts in the hash
                pass
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise FetchError(f"could not fetch {url}: {exc}") from exc
    if sha256 and stream.digest.hexdigest() != sha256:
        raise FetchError(f"{url} has sha256 {stream.digest.hexdigest()}, not the registered {sha256}: its content "
                         "changed; register the dataset again with its new version")
    return limit.bytes, limit.files


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
                _make_folders(into, name)
            elif info.isreg() and not info.issparse():
                member = tar.extractfile(info)
                assert member is not None
                _write_file(into, name, member, limit, executable=bool(info.mode & stat.S_IXUSR))
            else:
                kind = "a link" if info.issym() or info.islnk() else "a device, FIFO or sparse file"
                raise FetchError(f"{name!r} in the archive is {kind}; a dataset holds folders and files only")


def _make_folders(into: Path, name: str) -> None:
    """Folders inside ``into`` (which holds only what this fetch made: folders and files)."""
    here = into
    for part in name.split("/"):
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            raise FetchError(f"{name!r}: below a file of the same name")
        if not here.exists():
            os.mkdir(here, 0o755)


def _write_file(into: Path, name: str, stream: Any, limit: Limit, *, executable: bool = False) -> None:
    parent, _, base = name.rpartition("/")
    if parent:
        _make_folders(into, parent)
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


def _copy_folder(root: str, source: str, into: Path, limit: Limit) -> tuple[int, int]:
    """A storage's folder, copied from ``root`` (the storage's own path, the admin's) down,
    never through a link: what a user put in the storage cannot lead root elsewhere."""
    if source != root and not source.startswith(root.rstrip("/") + "/"):
        raise FetchError(f"{source} is not inside its storage {root}")
    try:
        fd = os.open(root, _DIR_FLAGS)
        for part in [p for p in source[len(root):].split("/") if p]:
            step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = step
    except OSError as exc:
        raise FetchError(f"cannot open the dataset's folder {source} (without following links): {exc}") from exc
    try:
        _copy_tree(fd, into, "", limit)
    finally:
        os.close(fd)
    return limit.bytes, limit.files


def _copy_tree(fd: int, into: Path, prefix: str, limit: Limit) -> None:
    for name in sorted(os.listdir(fd)):
        shown = f"{prefix}{name}"
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            _make_folders(into, _name(shown))
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            try:
                _copy_tree(child, into, shown + "/", limit)
            finally:
                os.close(child)
        elif stat.S_ISREG(info.st_mode):
            file_fd = os.open(name, _FILE_FLAGS, dir_fd=fd)
            with os.fdopen(file_fd, "rb") as source:
                if not stat.S_ISREG(os.fstat(file_fd).st_mode):  # swapped since the stat
                    continue
                os.set_blocking(file_fd, True)
                _write_file(into, _name(shown), source, limit, executable=bool(info.st_mode & stat.S_IXUSR))
        # Links, devices, FIFOs and sockets are left out: a dataset is folders and files.
