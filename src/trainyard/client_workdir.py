"""Packing a project folder to send with a job: what ``.gitignore`` and ``.yardignore`` leave in.

The folder is walked without following symlinks; every ``.gitignore`` applies below its own
folder, as git reads them, and ``.yardignore`` files (same syntax) after them, so that a
``.yardignore`` can leave out what git keeps (data, checkpoints) or bring back what git
ignores (``!build/model.cfg``). ``.git`` is never sent, nor Trainyard's own home folder
(``$TRAINYARD_HOME``: a server's database, ``client.json``'s token) when it lies inside the
project folder. What is left becomes the canonical
archive of ``core.workdirs`` — the same bytes the server will compute, so the client knows
the content's hash before sending and skips an upload the server already holds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeGuard, TypeVar

from trainyard.client_config import home_dir
from trainyard.client_errors import TrainyardError, UsageError
from trainyard.client_input import path_named
from trainyard.client_models import Model

if TYPE_CHECKING:
    import pathspec

    from trainyard.client import Client
    from trainyard.core.workdirs import Canonical, Entry
    from trainyard.schemas.workdirs import WorkdirLimits, WorkdirView

_LIMITS: Model[WorkdirLimits] = Model("workdirs.WorkdirLimits")
_UPLOAD: Model[WorkdirView] = Model("workdirs.WorkdirView")

Reply = TypeVar("Reply")


class Reader(Protocol):
    """An answer read as the model says (``Client._parse``)."""

    def __call__(self, shape: Model[Reply], content: bytes, /) -> Reply: ...


IGNORE_FILES = (".gitignore", ".yardignore")
# The least limit a server may set (core/settings.py: workdir_max_mb >= 1): a folder within it is
# sent without asking the server's (GET /workdirs/limits); a bigger one asks, and is refused
# before sending if past it, naming its biggest files, as before.
LEAST_LIMIT_BYTES = 1 << 20
ALWAYS_LEFT_OUT = (".git",)


def pack(folder: Path, *, max_bytes: int, max_files: int | None = None) -> Canonical:
    """The canonical archive of ``folder``, or `WorkdirError` (a name, a symlink out of it, a
    special file, or the limits, naming the biggest files)."""
    from trainyard.core.workdirs import Entry, WorkdirError, canonical, size_text  # tarfile, gzip: for a folder sent

    if not folder.is_dir():
        raise WorkdirError(f"{folder}: not a folder; give the project folder to send with the job")
    options = {} if max_files is None else {"max_files": max_files}
    found = list(_walk(folder))
    sizes = [(entry.name, size) for entry, _, size in found if size is not None]
    total = sum(size for _, size in sizes)
    if total > max_bytes:  # said before reading a byte of them
        biggest = tuple(sorted(sizes, key=lambda s: (-s[1], s[0]))[:5])
        raise WorkdirError(f"{folder}: {size_text(total)} of files to send, more than this cluster's limit of "
                           f"{size_text(max_bytes)}; the biggest: "
                           + ", ".join(f"{n} ({size_text(s)})" for n, s in biggest)
                           + "; leave them out with a .yardignore, or put data in a storage", biggest=biggest)
    entries = (Entry(entry.name, data=path.read_bytes(), executable=entry.executable) if size is not None else entry
               for entry, path, size in found)
    return canonical(entries, max_bytes=max_bytes, **options)


def _spec(folder: Path, name: str) -> pathspec.GitIgnoreSpec | None:
    import pathspec  # only a submit that sends a folder pays for it, not every `yard` command

    try:
        text = (folder / name).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
        return None
    return pathspec.GitIgnoreSpec.from_lines(text.splitlines())


def _ignored(rules: list[tuple[str, pathspec.GitIgnoreSpec]], relative: str, is_dir: bool) -> bool:
    """Whether the last rule that speaks of ``relative`` ignores it (git's order: deeper files
    and later lines win; ``.yardignore`` after ``.gitignore`` in each folder)."""
    verdict = False
    for base, spec in rules:
        if base and not relative.startswith(base + "/"):
            continue
        inner = relative[len(base) + 1:] if base else relative
        result = spec.check_file(inner + "/" if is_dir else inner)
        if result.include is not None:
            verdict = bool(result.include)
    return verdict


def _walk(root: Path) -> Iterator[tuple[Entry, Path, int | None]]:
    """Every entry left in, with its path and, for a file, its size (its data read later)."""
    from trainyard.core.workdirs import Entry, WorkdirError

    stack: list[tuple[Path, str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [(root, "", [])]
    home = _identity(home_dir())  # a server's database and the admin's token are not the project's
    while stack:
        folder, relative, inherited = stack.pop()
        rules = list(inherited)
        for name in IGNORE_FILES:
            if (spec := _spec(folder, name)) is not None:
                rules.append((relative, spec))
        with os.scandir(folder) as entries:
            children = sorted(entries, key=lambda e: e.name)
        for child in children:
            name = f"{relative}/{child.name}" if relative else child.name
            if child.name in ALWAYS_LEFT_OUT and not relative:
                continue
            info = child.stat(follow_symlinks=False)
            is_dir = stat.S_ISDIR(info.st_mode)
            if _ignored(rules, name, is_dir):
                continue
            if is_dir:
                if (info.st_dev, info.st_ino) == home:
                    continue
                yield Entry(name), Path(child.path), None
                stack.append((Path(child.path), name, rules))
            elif stat.S_ISLNK(info.st_mode):
                yield Entry(name, target=os.readlink(child.path)), Path(child.path), None
            elif stat.S_ISREG(info.st_mode):
                yield (Entry(name, executable=bool(info.st_mode & stat.S_IXUSR)), Path(child.path),
                       info.st_size)
            else:
                raise WorkdirError(f"{name!r}: a device, FIFO or socket; leave it out with a .yardignore", name)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def names_upload(job_file: object) -> bool:
    """Whether the job file's own ``workdir`` names an upload (``sha256:…``) already."""
    document = _document(job_file)
    named = document.get("workdir") if isinstance(document, Mapping) else None
    return _is_digest(named)


def _is_digest(value: object) -> TypeGuard[str]:
    """Whether ``value`` names an upload (``sha256:…``); core/workdirs.py (tarfile, gzip) is
    imported only for a value that may."""
    if not isinstance(value, str) or not value.startswith("sha256:"):
        return False
    from trainyard.core.workdirs import is_digest

    return is_digest(value)


def _document(job_file: object) -> object:
    """The job file as data (a path read, text parsed); None when it cannot be read, or when
    its text cannot name a ``workdir`` (what its callers read), which PyYAML is not imported for."""
    path = path_named(job_file)
    try:
        text = path.read_text(encoding="utf-8") if path is not None else job_file
    except (OSError, UnicodeDecodeError):
        return None  # the server says what is wrong with the file
    if not isinstance(text, (str, bytes)):
        return job_file
    if not may_name(text, "workdir"):
        return None
    import yaml  # a job file's reader: not for the calls that send none (issue 33)

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def may_name(text: str | bytes, key: str) -> bool:
    """Whether a job file (YAML or JSON) may have the mapping key ``key``: False only where its
    text cannot spell it, so that PyYAML is imported and run only for a file that may (issue
    33). A key is its own characters in the file unless written with escapes (``"\\x73weep"``)
    or in UTF-16 (PyYAML reads bytes so after a byte-order mark), where its letters hold zero
    bytes."""
    if isinstance(text, bytes):
        return key.encode() in text or b"\\" in text or b"\0" in text
    return key in text or "\\" in text


def folder_for(job_file: object, workdir: str | os.PathLike[str] | None) -> Path | None:
    """The folder a submit sends: ``workdir`` when given; else the job file's own ``workdir``
    (unless it already names an upload), relative to the job file's folder when the job file
    is a path, else to the current folder; None when neither names one."""
    if workdir is not None:
        return Path(workdir).expanduser()
    path = path_named(job_file)
    document = _document(job_file)
    named = document.get("workdir") if isinstance(document, Mapping) else None
    if not isinstance(named, str) or _is_digest(named):
        return None
    base = (path.parent if path is not None else Path.cwd()).resolve()
    folder = (base / named).resolve()
    if named.startswith(("/", "~")) or not folder.is_relative_to(base):
        # A job file from someone else must not make `yard submit` send ~/.ssh or /etc.
        raise UsageError(f"the job file's workdir {named!r} is not a folder beside it (a relative path below the "
                         f"job file's folder, {base}); to send another folder say so: --workdir DIR (the SDK's "
                         "workdir=)")
    return folder


def workdir_digest(client: Client, job_file: object, workdir: str | os.PathLike[str] | None) -> str | None:
    """The upload a submit names: ``workdir`` if it is a digest already, else the folder
    ``folder_for`` finds, sent; None when there is none."""
    if _is_digest(workdir):
        return workdir
    folder = folder_for(job_file, workdir)
    return None if folder is None else send(client, folder).digest


def packed(client: Client, folder: Path, *, read: Reader | None = None) -> Canonical:
    """``folder`` packed within the server's limit (`UsageError` saying why it cannot be), not
    sent: what `yard submit --dry-run` checks. ``read`` as ``send``'s."""
    parse: Reader = read or client._parse
    from trainyard.core.workdirs import WorkdirError

    try:
        try:  # within every server's limit: not asked (a round trip less, issue 33)
            return pack(folder, max_bytes=LEAST_LIMIT_BYTES)
        except WorkdirError as exc:
            if not exc.biggest:  # not its size: the same whatever the limit
                raise
            limits = parse(_LIMITS, client._request("GET", "/workdirs/limits").content)
            return pack(folder, max_bytes=limits.maxBytes)  # refused before a byte is read, as the first
    except WorkdirError as exc:
        raise UsageError(f"cannot send {folder} as the job's working directory: {exc}") from exc


def send(client: Client, folder: Path, *, read: Reader | None = None) -> WorkdirView:
    """Pack ``folder`` within the server's limit and send it, unless the server holds it already.
    ``read`` reads the answers in place of ``client._parse`` (`yard submit`: without the models)."""
    parse: Reader = read or client._parse
    archive = packed(client, folder, read=read)
    try:
        return parse(_UPLOAD, client._request("GET", f"/workdirs/{archive.digest}").content)
    except TrainyardError as exc:
        if exc.status != 404:
            raise
    response = client._request("PUT", "/workdirs", content=archive.gzipped(),
                               headers={"Content-Type": "application/gzip"})
    return parse(_UPLOAD, response.content)
