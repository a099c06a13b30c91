"""Packing a project folder to send with a job: what ``.gitignore`` and ``.yardignore`` leave in.

The folder is walked without following symlinks; every ``.gitignore`` applies below its own
folder, as git reads them, and ``.yardignore`` files (same syntax) after them, so that a
``.yardignore`` can leave out what git keeps (data, checkpoints) or bring back what git
ignores (``!build/model.cfg``). ``.git`` is never sent. What is left becomes the canonical
archive of ``core.workdirs`` — the same bytes the server will compute, so the client knows
the content's hash before sending and skips an upload the server already holds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pathspec

from trainyard.core.workdirs import Canonical, Entry, WorkdirError, canonical

IGNORE_FILES = (".gitignore", ".yardignore")
ALWAYS_LEFT_OUT = (".git",)


def pack(folder: Path, *, max_bytes: int, max_files: int | None = None) -> Canonical:
    """The canonical archive of ``folder``, or `WorkdirError` (a name, a symlink out of it, a
    special file, or the limits, naming the biggest files)."""
    if not folder.is_dir():
        raise WorkdirError(f"{folder}: not a folder; give the project folder to send with the job")
    options = {} if max_files is None else {"max_files": max_files}
    found = list(_walk(folder))
    sizes = [(entry.name, size) for entry, _, size in found if size is not None]
    total = sum(size for _, size in sizes)
    if total > max_bytes:  # said before reading a byte of them
        biggest = tuple(sorted(sizes, key=lambda s: (-s[1], s[0]))[:5])
        raise WorkdirError(f"{folder}: {total} bytes of files to send, more than this cluster's limit of "
                           f"{max_bytes}; the biggest: " + ", ".join(f"{n} ({s} bytes)" for n, s in biggest)
                           + "; leave them out with a .yardignore, or put data in a storage", biggest=biggest)
    entries = (Entry(entry.name, data=path.read_bytes(), executable=entry.executable) if size is not None else entry
               for entry, path, size in found)
    return canonical(entries, max_bytes=max_bytes, **options)


def _spec(folder: Path, name: str) -> pathspec.GitIgnoreSpec | None:
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
    stack: list[tuple[Path, str, list[tuple[str, pathspec.GitIgnoreSpec]]]] = [(root, "", [])]
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
                yield Entry(name), Path(child.path), None
                stack.append((Path(child.path), name, rules))
            elif stat.S_ISLNK(info.st_mode):
                yield Entry(name, target=os.readlink(child.path)), Path(child.path), None
            elif stat.S_ISREG(info.st_mode):
                yield (Entry(name, executable=bool(info.st_mode & stat.S_IXUSR)), Path(child.path),
                       info.st_size)
            else:
                raise WorkdirError(f"{name!r}: a device, FIFO or socket; leave it out with a .yardignore", name)
