"""Job directories, shared by the backends: where ``$TRAINYARD_JOB_DIR`` is, its disk use, removal.

Each backend decides where a job's directory lives (see its module docstring); this
module holds what they do alike, so that neither imports the other. A job directory is
``<root>/<job id>/jobdir``: beside the job's attempt folders (numbers), so one listing
finds every job directory, and removing it leaves the tasks' own files alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from trainyard.backends.base import DirUsage

JOB_DIR_VARIABLE = "TRAINYARD_JOB_DIR"
JOB_DIR_NAME = "jobdir"
# A walk of a job directory stops after this many entries: the API answers with "at least"
# rather than let one job with millions of small files stall a request.
MAX_USAGE_ENTRIES = 100_000


class JobDirTree:
    """``JobDirectories`` for a backend whose job directories are ``<job_dirs_root>/<job>/jobdir``.

    A base class of the backends: each sets ``job_dirs_root`` in its constructor.
    """

    job_dirs_root: Path

    def job_dir(self, job_id: int) -> Path:
        """The job's directory, shared by its tasks and kept across its attempts."""
        return job_dir_path(self.job_dirs_root, job_id)

    def job_dir_usage(self, job_id: int) -> DirUsage | None:
        return measure(self.job_dir(job_id))

    def job_dir_ids(self) -> list[int]:
        return job_ids_with_dirs(self.job_dirs_root)

    def remove_job_dir(self, job_id: int) -> None:
        """The job's directory, and with it what its tasks kept for it: their working
        directories (their results, the working directory they unpacked), scripts, secrets'
        files and suspend folders (``task_work_paths``). Their logs and records stay."""
        failed: OSError | None = None
        for path in self.task_work_paths(job_id):  # first: a failure leaves the job dir, tried again next sweep
            try:
                remove_entry(path)
            except OSError as error:
                failed = failed or error
        if failed is not None:
            raise failed
        remove(self.job_dir(job_id))

    def task_work_paths(self, job_id: int) -> list[Path]:
        """What the job's tasks kept beside their records, removed with the job's directory
        (``remove_job_dir``): each backend knows its own layout; none by default."""
        return []


def job_dir_path(root: Path, job_id: int) -> Path:
    """``root/<job id>/jobdir``; ValueError for an id no job can have."""
    if type(job_id) is not int or job_id < 0:
        raise ValueError(f"job id must be a non-negative int, got {job_id!r}")
    return root / str(job_id) / JOB_DIR_NAME


def job_ids_with_dirs(root: Path) -> list[int]:
    """The ids of the jobs under ``root`` that have a job directory."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    return sorted(
        int(entry.name)
        for entry in entries
        if entry.name.isdigit() and entry.is_dir(follow_symlinks=False) and _is_real_dir(Path(entry.path, JOB_DIR_NAME))
    )


def measure(path: Path, max_entries: int = MAX_USAGE_ENTRIES) -> DirUsage | None:
    """The disk use of the tree at ``path`` (None when there is none), symlinks not followed.

    Counts allocated blocks, as ``du`` does: what the job's files take from the disk.
    """
    if not _is_real_dir(path):
        return None
    total, files, seen = os.lstat(path).st_blocks * 512, 0, 0
    pending = [path]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue  # removed or replaced while we walked: it holds nothing now
        for entry in entries:
            seen += 1
            if seen > max_entries:
                return DirUsage(bytes=total, files=files, complete=False)
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                pending.append(Path(entry.path))
            else:
                files += 1
    return DirUsage(bytes=total, files=files)


def remove(path: Path) -> None:
    """Delete the tree at ``path`` (nothing when there is none); never follows a symlink.

    A task running as the server's own account may have left a folder without access for
    its owner (``chmod 0``); such folders get it back first, then the tree goes. Only a
    server that is not root does that: then everything in the tree is its own uid's (a
    task could swap a folder for a symlink while we chmod, and gain nothing). Root needs
    no access bits, and chmods nothing that a task account could have placed.
    """
    if not _is_real_dir(path):
        return
    try:
        _rmtree(path)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        _grant_owner_access(path)
        _rmtree(path)


def remove_entry(path: Path) -> None:
    """A folder's tree (``remove``) or a file; never follows a symlink (a link itself goes)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        remove(path)
    else:
        path.unlink(missing_ok=True)


def numbered(folder: Path) -> list[Path]:
    """The real folders named by a number in ``folder`` (a job's attempts, the jobs of a root)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(Path(e.path) for e in entries if e.name.isascii() and e.name.isdigit()
                  and e.is_dir(follow_symlinks=False))


def _rmtree(path: Path) -> None:
    """``shutil.rmtree``; for a tree nested deeper than Python recurses (a task's
    ``mkdir a && cd a`` a thousand times), coreutils' ``rm``, which walks it without
    recursion and, like rmtree, never follows a symlink nor leaves the file system."""
    try:
        shutil.rmtree(path)
    except RecursionError:
        try:
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True, capture_output=True,
                           timeout=3600)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            # An OSError, as rmtree's own failures: the non-root server then gives its folders
            # their access back and tries again (``remove``), and a sweep goes on to the next job.
            stderr = error.stderr.decode(errors="replace").strip() if isinstance(error.stderr, bytes) else ""
            raise PermissionError(f"cannot remove {path}: {stderr or error}") from error


def _grant_owner_access(path: Path) -> None:
    pending = [str(path)]
    while pending:
        directory = pending.pop()
        try:
            mode = stat.S_IMODE(os.lstat(directory).st_mode)
            if mode & 0o700 != 0o700:
                os.chmod(directory, mode | 0o700)
            pending += [e.path for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # not ours to change: rmtree will say so


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
