"""Running local tasks as other OS accounts (``run_as`` or per-user ``accounts``).

Who an account is, and the work-directory tree (work dirs, script copies, secrets files)
it can reach while the backend's state directory stays root-only. The layout is
described in ``backend``'s module docstring.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainyard.backends.base import WORKDIR_ARCHIVE_NAME, WORKDIR_VARIABLE

WORK_ROOT_MODE = 0o711  # root-owned: the task user may pass through but not list or create
TASK_WORK_MODE = 0o700  # owned by the task user: its working directory
ENVIRONMENTS_MODE = 0o755  # environments: their owner's to build, every task's to run in
SCRIPT_MODE = 0o400  # owned by the task user: the script bash reads
SECRET_MODE = 0o400  # owned by the task user: one secret of its job
PUBLISHED_MODE = 0o400  # owned by the task user: what Trainyard tells it (a suspend request)
# A secret's file name: no path separators, no hidden or special names.
SECRET_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


@dataclass(frozen=True)
class TaskUser:
    """An unprivileged account that tasks run as."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def for_tasks(cls, name: str) -> TaskUser:
        """The account ``name`` to run tasks as; ValueError when we are not root to
        switch to it, when it does not exist, or when it is root itself."""
        if os.geteuid() != 0:
            raise ValueError(
                f"run_as={name!r} needs the server to run as root (it switches each task to that"
                f" user); this process runs as uid {os.geteuid()}"
            )
        return cls.unprivileged(name, "run_as")

    @classmethod
    def unprivileged(cls, name: str, setting: str) -> TaskUser:
        """The existing OS account ``name``; ValueError, naming ``setting``, when there is
        none or it is root."""
        try:
            entry = pwd.getpwnam(name)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{setting}: there is no OS account named {name!r}") from None
        if entry.pw_uid == 0:
            raise ValueError(f"{setting}: {name!r} is root; tasks must run as an unprivileged account")
        return cls.of(entry)

    @classmethod
    def of(cls, entry: pwd.struct_passwd) -> TaskUser:
        return cls(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)

    def groups(self) -> list[int]:
        """The user's supplementary groups as of now (its primary group included)."""
        return os.getgrouplist(self.name, self.gid)

    def spec(self) -> dict[str, object]:
        """What the supervisor needs to drop privileges to this user (no NSS look-ups there)."""
        return {"name": self.name, "uid": self.uid, "gid": self.gid, "groups": self.groups()}


def set_up_work_root(
    state_dir: Path, user: TaskUser | None, work_dir_root: Path | None, *, per_user: bool = False
) -> Path | None:
    """Prepare where work dirs go; None means inside each task dir (no task account, no root).

    With ``user`` (one shared account) or ``per_user`` (an account per Trainyard user) the
    state dir becomes private and the work-dir root must be reachable by the accounts.
    """
    if user is None and not per_user:
        if work_dir_root is None:
            return None
        root = Path(work_dir_root).absolute()
        root.mkdir(parents=True, exist_ok=True)
        return root
    root = state_dir.with_name(f"{state_dir.name}-work") if work_dir_root is None else Path(work_dir_root)
    make_private(state_dir)
    prepare_work_root(root.absolute(), state_dir, user)
    return root.absolute()


def make_private(state_dir: Path) -> None:
    """Make the state directory reachable by its owner (us) alone."""
    info = os.lstat(state_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ValueError(f"state directory {state_dir} must be a directory owned by uid {os.geteuid()}")
    os.chmod(state_dir, 0o700)


def prepare_work_root(work_root: Path, state_dir: Path, user: TaskUser | None) -> None:
    """Create (or check) the work-dir root: ours, not writable by others, reachable by
    ``user`` (None: by any account)."""
    if work_root == state_dir or state_dir in work_root.parents:
        raise ValueError(f"work_dir_root {work_root} must be outside the state directory {state_dir}")
    try:
        work_root.mkdir(parents=True, mode=WORK_ROOT_MODE)
        os.chmod(work_root, WORK_ROOT_MODE)  # whatever the umask
    except FileExistsError:
        info = os.lstat(work_root)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ValueError(
                f"work_dir_root {work_root} must be a directory owned by uid {os.geteuid()}"
                " and writable by no one else"
            ) from None
    if blocked := unsearchable_ancestor(work_root, user):
        who = "task accounts" if user is None else f"run_as user {user.name!r}"
        raise ValueError(
            f"{who} cannot reach work_dir_root {work_root}: {blocked} is not searchable by them; choose"
            " a work_dir_root outside private directories (e.g. /var/lib/trainyard-work)"
        )


def unsearchable_ancestor(path: Path, user: TaskUser | None) -> Path | None:
    """The first directory on the way to ``path`` (itself included) that ``user`` (None:
    any account, i.e. "others") cannot pass through, judged by mode bits; None when every
    one is searchable."""
    groups = set() if user is None else set(user.groups())
    for directory in reversed([path, *path.parents]):
        info = os.stat(directory)
        if user is not None and info.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None


def make_task_work_dir(work_root: Path, parts: tuple[str, ...], user: TaskUser | None) -> Path:
    """``work_root/parts...``: intermediate dirs ours 0711, the last ``user``'s (else ours) 0700."""
    directory = work_root
    for part in parts[:-1]:
        directory = directory / part
        _mkdir_exact(directory, WORK_ROOT_MODE)
    work = directory / parts[-1]
    _mkdir_exact(work, TASK_WORK_MODE)
    if user is not None:
        os.chown(work, user.uid, user.gid, follow_symlinks=False)
    return work


def make_owned_dir(directory: Path, user: TaskUser | None) -> Path:
    """``directory`` (its parent exists) with mode 0700, owned by ``user`` (else by us)."""
    _mkdir_exact(directory, TASK_WORK_MODE)
    if user is not None:
        os.chown(directory, user.uid, user.gid, follow_symlinks=False)
    return directory


def make_readable_owned_dir(directory: Path, user: TaskUser | None) -> Path:
    """``directory`` (its parent exists) with mode 0755, owned by ``user`` (else by us): the
    owner's to write, everyone's to read (an environment a group shares)."""
    _mkdir_exact(directory, ENVIRONMENTS_MODE)
    if user is not None:
        os.chown(directory, user.uid, user.gid, follow_symlinks=False)
    return directory


def make_passable_dir(directory: Path, user: TaskUser | None) -> Path:
    """``directory`` (its parent exists), ours: passable by ``user`` (0711), not listable nor
    writable; 0700 when tasks run as our own account."""
    _mkdir_exact(directory, TASK_WORK_MODE if user is None else WORK_ROOT_MODE)
    return directory


def publish_file(path: Path, data: bytes, owner: tuple[int, int] | None) -> None:
    """Replace ``path`` (in a directory of ours) atomically with a 0400 file holding ``data``,
    owned by ``owner`` (uid, gid; None: by us): a reader sees no file or a whole one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, PUBLISHED_MODE)
    try:
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, PUBLISHED_MODE)
            view = memoryview(data)
            while view:  # one write(2) stops short of 2 GiB
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def publish_workdir(inbox: Path, archive: str | None, owner: tuple[int, int] | None) -> dict[str, str]:
    """Hand the job's working directory's archive to the task: a 0400 copy, ``owner``'s, in
    ``inbox`` (its suspend request's folder, ours: the task cannot swap the file); the
    variable that names it, or nothing when the job has none."""
    if archive is None:
        return {}
    target = inbox / WORKDIR_ARCHIVE_NAME
    publish_file(target, Path(archive).read_bytes(), owner)
    return {WORKDIR_VARIABLE: str(target)}


def write_secret_files(directory: Path, secrets: Mapping[str, str], user: TaskUser | None) -> list[str]:
    """One file per secret in ``directory`` (0700), each 0400, owned by ``user`` (else by
    us); returns the names skipped because they are no safe file name."""
    make_owned_dir(directory, user)
    skipped = []
    for name, value in secrets.items():
        if not SECRET_FILE_NAME.fullmatch(name):
            skipped.append(name)
            continue
        path = directory / name
        try:
            os.unlink(path)  # a relaunch rewrites it; 0400 cannot be opened for writing
        except FileNotFoundError:
            pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, SECRET_MODE)
        try:
            if user is not None:
                os.fchown(fd, user.uid, user.gid)
            os.fchmod(fd, SECRET_MODE)
            os.write(fd, value.encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    return skipped


def write_user_script(path: Path, script: str, user: TaskUser) -> None:
    """Write the task's script where bash, running as ``user``, can read it (and only it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, SCRIPT_MODE)
    try:
        os.fchown(fd, user.uid, user.gid)
        os.fchmod(fd, SCRIPT_MODE)
        os.write(fd, script.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)


def _mkdir_exact(directory: Path, mode: int) -> None:
    """Create ``directory`` with exactly ``mode``; an existing one must be a real directory."""
    try:
        os.mkdir(directory, mode)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            raise RuntimeError(f"{directory} exists and is not a directory") from None
    os.chmod(directory, mode)  # whatever the umask; no one else can create entries here
