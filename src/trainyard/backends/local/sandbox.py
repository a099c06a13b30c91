"""The per-task sandbox of the local backend: a bubblewrap (``bwrap``) command line.

A task runs in its own PID, IPC and mount namespaces (the network is shared: tasks of a
job talk over TCP). Inside it the whole host is visible as before: each of the host's
top-level entries is bound (``--dev-bind``: ``/dev`` works, so do NVIDIA devices) over
bwrap's own tmpfs root, so that a folder a mount point needs at the top (``/data``) is made
in that tmpfs, never on the host. Except:

- ``/proc`` is private: the task sees its own processes only, never another task's
  environment or command line;
- ``/tmp`` and ``/var/tmp`` are private tmpfs, gone with the task;
- ``/dev/shm`` is a directory shared by the tasks of one job attempt (NCCL's shared-memory
  transport between tasks on one node needs it), private to that attempt;
- the server's home, the backend's state directory and the work-dir root are covered by
  empty tmpfs, then only the task's own work dir, its job's directory, its secrets dir
  and its script are bound back;
- every storage's path on the node (all admins' storages, the home and group roots) is
  covered by an empty tmpfs too: grants are the platform's, not the files' modes. Only the
  job's own storages are bound, at their mountPath, read-only where the job or the grant
  says, each from a folder the supervisor opened without following a link
  (``open_mount_fds``, bwrap's ``--bind-fd``): a subPath is a folder inside its storage,
  whatever a user puts there meanwhile;
- a mount point is made only inside a tmpfs of the sandbox's own: a storage's covered path,
  the private /tmp, or a top-level folder (``/mnt``, ``/data``) that is the task's own, empty
  but for its mounts, whenever the job mounts a storage in it. No mount lands at, over or
  under what the system and the sandbox itself run from (``PROTECTED``; bwrap, env, sh and
  setpriv, which runs as root inside), nor inside another mount or the task's own folders,
  where a link could send it elsewhere.

How the task gets to its account depends on who runs the server:

- as root, ``bwrap`` runs as root (no user namespace needed, so it works where
  unprivileged user namespaces are disabled) and ``setpriv`` inside drops to the task's
  account: uid, gid, groups, no capabilities (bounding set included), no new privileges;
- as anyone else, ``bwrap --unshare-user`` makes the namespaces in a user namespace where
  the task keeps the server's uid and has no capabilities; mounts made there are locked,
  so the task cannot lift the tmpfs that hide the server's files.

Signals: the supervisor stops a task by signalling its process group, a suspension
signals the group too (any of ``spec``'s suspend signals), and bwrap forwards no signals.
So bwrap itself starts with those signals ignored (``env --ignore-signal``) and the task
with them restored (``env --default-signal``): a stop or a suspension reaches the task,
which gets its whole grace period, while bwrap waits for it and exits with its status
(128 + N when the task died of signal N; the exit record then names no signal). Restored,
not inherited as ignored: a shell cannot trap a signal it was started ignoring. A stop that comes while
bwrap sets up would be ignored, so a guard checks for the stop file first (``_STOP_GUARD``).
When bwrap dies (SIGKILL after the grace), its PID namespace dies with it: a sandboxed
task can leave no process behind. (bwrap does not die with the supervisor, though: a
task outlives its supervisor, sandboxed or not.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainyard.spec.models import SUSPEND_SIGNALS
from trainyard.spec.storages import SYSTEM_PATHS, inside

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "none")
_PROBE_TIMEOUT_SECONDS = 10.0
_SCRATCH = ("/tmp", "/var/tmp")  # private to each task, world-writable inside it as usual
# While bwrap sets up, SIGTERM is ignored: a stop signalled then would be lost. A stop
# writes its stop file before it signals, so once SIGTERM is back to default (this shell),
# either the file is there and the task never starts, or the signal is still to come.
_STOP_GUARD = '[ -e "$1" ] && exit 143; shift; exec "$@"'
# What reaches a sandboxed task's group from outside: a stop's SIGTERM, and the signals a
# job may choose to be told to suspend by.
_PASSED_SIGNALS = ",".join(["TERM", *(s.removeprefix("SIG") for s in SUSPEND_SIGNALS if s not in ("none", "SIGTERM"))])
# What the system and the sandbox's own programs run from, as root: no mount lands at, over
# or under one (a storage's own path, the admin's, included). /var and /root hold no program
# root runs here, and may hold storages or the server's files (hidden, not mounted over).
PROTECTED = tuple(p for p in SYSTEM_PATHS if p not in ("/var", "/root"))
# What the dynamic loader and libc read from the environment (glibc drops them for setuid
# programs; env, bwrap, sh and setpriv run as root before the drop without that guard): a
# job's LD_PRELOAD would run its library in them, as root. They reach the task after the drop.
LOADER_PREFIXES = ("LD_", "MALLOC_", "GLIBC_")
LOADER_NAMES = frozenset({"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "NIS_PATH", "NLSPATH",
                          "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR"})


def split_loader_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` without the loader's variables (what the root side runs with), and those."""
    loader = {k: v for k, v in env.items() if k in LOADER_NAMES or k.startswith(LOADER_PREFIXES)}
    return {k: v for k, v in env.items() if k not in loader}, loader


# The descriptors a task's storages are passed to bwrap on (``mount_fds``): above any the
# supervisor's task process holds.
MOUNT_FD_BASE = 64


@dataclass(frozen=True)
class Identity:
    """Who the task becomes inside a sandbox that bwrap entered as root."""

    uid: int
    gid: int
    groups: tuple[int, ...]


@dataclass(frozen=True)
class StorageMount:
    """A storage the task mounts: the folder ``sub`` ("" for the whole) of the storage at
    ``root`` (its own path, the admin's), at ``target``, read-only or not."""

    root: Path
    sub: str
    target: Path
    read_only: bool


def mount_fds(mounts: Sequence[StorageMount]) -> list[list[Any]]:
    """``[fd, root, sub]`` of each mount: the supervisor opens ``sub`` inside ``root`` on
    ``fd`` (``open_mount_fds``), which ``sandbox_argv``'s ``--bind-fd`` names."""
    return [[MOUNT_FD_BASE + i, str(m.root), m.sub] for i, m in enumerate(mounts)]


@dataclass(frozen=True)
class Sandbox:
    """A usable bubblewrap, and what it hides from every task besides the backend's own dirs."""

    bwrap: str
    env: str  # coreutils ``env``, for the signal dispositions
    shell: str  # a POSIX sh, for the stop guard
    setpriv: str | None  # util-linux ``setpriv``; needed when the server runs as root
    user_namespace: bool  # True when the server is not root: bwrap needs --unshare-user
    hidden: tuple[Path, ...] = ()  # e.g. $TRAINYARD_HOME

    def with_hidden(self, *paths: Path) -> Sandbox:
        return Sandbox(self.bwrap, self.env, self.shell, self.setpriv, self.user_namespace, (*self.hidden, *paths))


def find_sandbox(
    mode: SandboxMode, hidden: Sequence[Path] = (), *, as_root: bool | None = None
) -> tuple[Sandbox | None, str]:
    """The sandbox to use for ``mode``, and why there is none when there is none.

    ``auto`` uses bubblewrap when it is installed and works here (probed once, now);
    ``bwrap`` insists on it (ValueError with the reason when it cannot work); ``none``
    never sandboxes.
    """
    if mode not in SANDBOX_MODES:
        raise ValueError(f"task sandbox must be one of {', '.join(SANDBOX_MODES)}; got {mode!r}")
    if mode == "none":
        return None, "the task sandbox is turned off (task_sandbox=none)"
    root = os.geteuid() == 0 if as_root is None else as_root
    sandbox, reason = _usable_bwrap(root, tuple(Path(p).absolute() for p in hidden))
    if sandbox is None and mode == "bwrap":
        raise ValueError(f"task_sandbox=bwrap, but bubblewrap cannot be used here: {reason}")
    return sandbox, reason


def _usable_bwrap(as_root: bool, hidden: tuple[Path, ...]) -> tuple[Sandbox | None, str]:
    bwrap, env, setpriv = shutil.which("bwrap"), shutil.which("env"), shutil.which("setpriv")
    shell = shutil.which("sh")
    if bwrap is None:
        return None, "bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap"
    if env is None or shell is None:
        return None, "coreutils' env or sh is not on PATH"
    if as_root and setpriv is None:
        return None, "util-linux's setpriv is not on PATH"
    sandbox = Sandbox(bwrap, env, shell, setpriv if as_root else None, user_namespace=not as_root, hidden=hidden)
    probe = [*_namespaces(sandbox), "--tmpfs", "/tmp", "--", env, "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{bwrap} could not be run: {exc}"
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit status {done.returncode}"
        if not as_root:
            why += " (as a non-root user bwrap needs unprivileged user namespaces)"
        return None, f"{bwrap} does not work here: {why}"
    return sandbox, ""


def _namespaces(sandbox: Sandbox, root: Sequence[str] | None = None) -> list[str]:
    """bwrap, its namespaces and its root: ``root`` (``_root_entries``), or the host's ``/``
    as a whole, with a private /proc (the probe's)."""
    argv = [sandbox.bwrap]
    if sandbox.user_namespace:
        argv += ["--unshare-user", "--disable-userns"]
    # No --die-with-parent: a task outlives its supervisor, as an unsandboxed one does.
    argv += ["--unshare-pid", "--unshare-ipc"]
    return [*argv, "--dev-bind", "/", "/", "--proc", "/proc"] if root is None else [*argv, *root]


def sandbox_argv(
    sandbox: Sandbox,
    command: Sequence[str],
    *,
    hidden: Sequence[Path],
    work_dir: Path,
    shm_dir: Path,
    stop_file: Path,
    bound: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    mounts: Sequence[StorageMount] = (),
    storage_paths: Sequence[Path] = (),
    identity: Identity | None = None,
    loader_env: Mapping[str, str] | None = None,
) -> list[str]:
    """The argv that runs ``command`` in the sandbox, in ``work_dir``.

    ``hidden`` adds to the sandbox's own hidden paths; ``work_dir``, ``shm_dir`` (mounted
    on /dev/shm) and ``bound`` (read-only: e.g. the secrets dir and the script) are bound
    back at their own paths, and ``writable`` (e.g. the job's directory) writable, over them.
    ``storage_paths`` (every storage's path on the node) are hidden like ``hidden``, and so
    is each mount's root; ``mounts`` are then bound at their targets from the descriptors
    ``mount_fds`` numbers (the supervisor opens them). ValueError for a target that may not
    be used (see the module docstring). ``stop_file`` is the file a stop request creates before the
    task's group is signalled; its folder is bound read-only too (see ``_STOP_GUARD``).
    ``identity`` is who the task becomes when bwrap runs as root (required then).
    ``loader_env`` (``split_loader_env``; the caller runs the argv without them) is set for
    the task only, after the drop: nothing that runs as root reads them.
    """
    if not sandbox.user_namespace and identity is None:
        raise ValueError("a sandbox entered as root needs the task's identity to drop to")
    # Only what exists: a missing mount point outside the sandbox's own tmpfs would be made on the host.
    covers = _outermost([Path(p) for p in (*sandbox.hidden, *hidden, *storage_paths, *(m.root for m in mounts))
                         if os.path.isdir(p)])
    own = [stop_file.parent, work_dir, shm_dir, *writable, *bound]
    tmpfs = [*covers, *map(Path, _SCRATCH)]
    _check_targets(sandbox, mounts, own)
    # A target outside every tmpfs: its top-level folder becomes the task's own (empty).
    private = sorted({m.target.parts[1] for m in mounts if not any(inside(str(m.target), str(t)) for t in tmpfs)})
    argv = [*_namespaces(sandbox, root=_root_entries(private)), "--proc", "/proc"]
    # Passable, not listable: the task reaches what is bound back, sees nothing else.
    for path in covers:
        argv += ["--perms", "0711", "--tmpfs", str(path)]
    for scratch in _SCRATCH:
        argv += ["--perms", "1777", "--tmpfs", scratch]
    argv += ["--bind", str(shm_dir), "/dev/shm"]
    # bwrap would make the folders leading to a mount point inside a tmpfs 0700 root-owned,
    # which the task's account could not pass: make them first, passable.
    for directory in _folders_inside(_outermost(tmpfs),
                                     [stop_file.parent, work_dir, *writable, *bound, *(m.target for m in mounts)]):
        argv += ["--perms", "0711", "--dir", str(directory)]
    for directory in _folders_inside([Path("/", name) for name in private], [m.target for m in mounts]):
        argv += ["--perms", "0755", "--dir", str(directory)]
    # In order: the stop file's folder (the task dir) may hold the work dir, which must
    # then be mounted over it, writable.
    argv += ["--ro-bind", str(stop_file.parent), str(stop_file.parent)]
    argv += ["--bind", str(work_dir), str(work_dir)]
    # Read-only first, so that a writable path inside a read-only one (the owner's folder of
    # the environments' root) is mounted over it, writable.
    for path in bound:
        argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        argv += ["--bind", str(path), str(path)]
    for (fd, _, _), mount in zip(mount_fds(mounts), mounts, strict=True):
        argv += ["--ro-bind-fd" if mount.read_only else "--bind-fd", str(fd), str(mount.target)]
    argv += ["--chdir", str(work_dir), "--", sandbox.env, f"--default-signal={_PASSED_SIGNALS}"]
    argv += [sandbox.shell, "-c", _STOP_GUARD, "trainyard-stop-guard", str(stop_file)]
    if identity is not None:
        argv += [_setpriv(sandbox), *_drop_to(identity), "--"]
    if loader_env:
        argv += [sandbox.env, "--", *(f"{name}={value}" for name, value in loader_env.items())]
    # bwrap itself must outlive them (see the module docstring): ignored from exec on.
    return [sandbox.env, f"--ignore-signal={_PASSED_SIGNALS}", *argv, *command]


def _check_targets(sandbox: Sandbox, mounts: Sequence[StorageMount], own: Sequence[Path]) -> None:
    """Refuse a mount that would land at, over or under what root runs from (the system's
    folders and the sandbox's own programs), at, over or inside the task's own folders, or
    inside another mount: a link there could send it anywhere."""
    programs = [sandbox.bwrap, sandbox.env, sandbox.shell, *([sandbox.setpriv] if sandbox.setpriv else [])]
    protected = [*PROTECTED, *{os.path.dirname(os.path.realpath(p)) for p in programs}]
    targets = [str(m.target) for m in mounts]
    for index, (mount, target) in enumerate(zip(mounts, targets, strict=True)):
        where = f"storage {mount.root}{'/' + mount.sub if mount.sub else ''} cannot be mounted at {target}"
        if not os.path.isabs(target) or os.path.normpath(target) != target or target == "/":
            raise ValueError(f"{where}: not a normalised absolute path")
        if clash := next((p for p in protected if inside(target, p) or inside(p, target)), None):
            raise ValueError(f"{where}: the system and the sandbox run from {clash}")
        if clash := next((str(p) for p in own if inside(target, str(p)) or inside(str(p), target)), None):
            raise ValueError(f"{where}: it is (inside) the task's own {clash}")
        if outer := next((t for i, t in enumerate(targets) if i != index and inside(target, t)), None):
            raise ValueError(f"{where}: it is inside another storage's mount point {outer}")


def _root_entries(private: Sequence[str]) -> list[str]:
    """The sandbox's root: the host's top-level entries, each bound over bwrap's own tmpfs
    root (symlinks made again), but ``private`` ones, empty folders of the task's own, and
    /proc, which ``--proc`` mounts. A mount point a job needs at the top is made in that tmpfs."""
    argv: list[str] = []
    with os.scandir("/") as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path = "/" + entry.name
            if entry.name == "proc" or entry.name in private:
                continue
            if entry.is_symlink():
                argv += ["--symlink", os.readlink(path), path]
            else:
                argv += ["--dev-bind", path, path]
    for name in private:
        argv += ["--perms", "0755", "--dir", "/" + name]
    return argv


def enter_argv(sandbox: Sandbox, joiner: Sequence[str], target: int, work_dir: str, command: Sequence[str],
               identity: Identity | None) -> list[str]:
    """The argv that runs ``command`` inside the running sandbox of process ``target`` (one
    of the task's processes in there): ``joiner`` (``sandboxjoin``, run by the server's
    interpreter) enters its user, mount, PID and IPC namespaces, so the command sees the
    task's files, /tmp, /dev/shm and processes, in ``work_dir``; then, when bwrap ran as
    root, it drops to the task's account (``identity``) with the task's restrictions."""
    if identity is None and not sandbox.user_namespace:
        raise ValueError("a sandbox entered as root needs the task's identity to drop to")
    drop = [] if identity is None else [_setpriv(sandbox), *_drop_to(identity), "--"]
    return [*joiner, str(target), work_dir, *drop, *command]


def _setpriv(sandbox: Sandbox) -> str:
    if sandbox.setpriv is None:
        raise ValueError("setpriv was not found; it is needed to drop privileges inside the sandbox")
    return sandbox.setpriv


def _drop_to(identity: Identity) -> list[str]:
    groups = ["--groups", ",".join(str(g) for g in identity.groups)] if identity.groups else ["--clear-groups"]
    return [
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        *groups,
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """``paths`` without duplicates and without any path inside another one (covered already)."""
    unique = sorted({Path(p).absolute() for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if path == Path("/"):
            raise ValueError("the sandbox cannot hide / itself")
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


def _folders_inside(covers: Sequence[Path], targets: Sequence[Path]) -> list[Path]:
    """The folders between a covering tmpfs and each target under it, outermost first."""
    folders: list[Path] = []
    for target in targets:
        target = Path(target).absolute()
        cover = next((c for c in covers if c in target.parents), None)
        if cover is None:
            continue
        for folder in reversed(target.parents):
            if cover in folder.parents and folder not in folders:
                folders.append(folder)
    return folders
