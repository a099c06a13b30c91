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
  under what the system and the sandbox itself run from (``PROTECTED``; bwrap, env, sh, and
  the task's start with its interpreter and that interpreter's library, which run as root
  inside), nor at, over or under what the sandbox hides, nor inside another mount or the
  task's own folders, where a link could send it elsewhere.

How the task gets to its account depends on who runs the server:

- as root, ``bwrap`` runs as root (no user namespace needed, so it works where
  unprivileged user namespaces are disabled) and the task's start inside drops to the
  task's account: uid, gid, groups, no capabilities (bounding set included), no new
  privileges;
- as anyone else, ``bwrap --unshare-user`` makes the namespaces in a user namespace where
  the task keeps the server's uid and has no capabilities; mounts made there are locked,
  so the task cannot lift the tmpfs that hide the server's files.

The launch chain, every step of which runs as root when the server does::

    env --ignore-signal=… [sh -c 'exec "$@" 9<userns.bpf' …] bwrap … --
        env --default-signal=… PYTHON -I -S sandboxjoin.py --stop STOP --spec SPEC --drop … --
            bash --noprofile --norc SCRIPT

None of it gets the job's environment: the supervisor execs it with ``LAUNCH_ENV`` (the
spec's ``launch_env``), since the dynamic loader honours ``LD_PRELOAD``,
``LD_LIBRARY_PATH`` and the like for root running an ordinary program, and a job could
name a library of its own there (issue 27: it ran as uid 0 in ``env``, bwrap, the stop
guard's shell and ``setpriv``; without root it would run in bwrap before the sandbox
exists, where the server's home is not hidden). The last step, the task's start (``sandboxjoin``, run by
the server's interpreter in isolated mode from the supervisor's private copy, which is
bound read-only into the sandbox), reads the task's environment from the task's
``spec.json`` (root's, 0600; in the task's directory, which the sandbox binds read-only;
never on a command line, which any account may read in /proc), drops privileges with the
same code as ``yard exec``, and execs bash, in its own place, with that environment.

User namespaces: a task makes none unless the admin allows it (``task_user_namespaces``).
In a user namespace of its own a task is root over its own mount namespace, where it can
cover any file; nothing of Trainyard's may run in there (``sandboxjoin`` joins bwrap's
init, not the task), but each one is also kernel attack surface that a shared machine need
not offer. As root, bwrap gets a seccomp filter (``sandboxjoin.user_namespace_filter``,
written to ``userns.bpf`` in the task's directory and passed on fd 9 with ``--seccomp``):
``unshare``/``clone`` with CLONE_NEWUSER fail with EPERM, ``clone3`` with ENOSYS (libc then
uses ``clone``); without root, ``--disable-userns`` does it.

Signals: the supervisor stops a task by signalling its process group, a suspension
signals the group too (any of ``spec``'s suspend signals), and bwrap forwards no signals.
So bwrap itself starts with those signals ignored (``env --ignore-signal``) and the task's
start with them restored (``env --default-signal``): a stop or a suspension reaches the task,
which gets its whole grace period, while bwrap waits for it and exits with its status
(128 + N when the task died of signal N; the exit record then names no signal). Restored,
not inherited as ignored: a shell cannot trap a signal it was started ignoring. A stop that comes while
bwrap sets up would be ignored, so the task's start checks for the stop file first: a stop
writes its stop file before it signals, so once SIGTERM is back to default, either the file
is there and the task never starts (exit status 143), or the signal is still to come.
When bwrap dies (SIGKILL after the grace), its PID namespace dies with it: a sandboxed
task can leave no process behind. (bwrap does not die with the supervisor, though: a
task outlives its supervisor, sandboxed or not.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from trainyard.backends import sandboxjoin
from trainyard.backends.sandboxjoin import user_namespace_filter
from trainyard.spec.models import SUSPEND_SIGNALS
from trainyard.spec.storages import SYSTEM_PATHS, inside


def real_interpreter(python: str = sys.executable) -> str:
    """The file behind ``python``: a virtual environment's ``python`` is a link to it (the
    real file is what an upgrade of Trainyard leaves in place, for supervisors and starters)."""
    return os.path.realpath(python)

SandboxMode = Literal["auto", "bwrap", "none"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("auto", "bwrap", "none")
_PROBE_TIMEOUT_SECONDS = 10.0
_SCRATCH = ("/tmp", "/var/tmp")  # private to each task, world-writable inside it as usual
# What every process that starts a sandboxed task runs with (root's, when the server is
# root): never the job's variables. The task's start gives the task its own.
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
# What reaches a sandboxed task's group from outside: a stop's SIGTERM, and the signals a
# job may choose to be told to suspend by.
# bwrap reads the seccomp filter from this fd, which this shell opens from the filter's file.
_FILTER_FD = 9
_WITH_FILTER = f'exec "$@" {_FILTER_FD}<"$0"'
USERNS_FILTER_FILE = "userns.bpf"
_PASSED_SIGNALS = ",".join(["TERM", *(s.removeprefix("SIG") for s in SUSPEND_SIGNALS if s not in ("none", "SIGTERM"))])
# What the system and the sandbox's own programs run from, as root: no mount lands at, over
# or under one (a storage's own path, the admin's, included). /var and /root hold no program
# root runs here, and may hold storages or the server's files (hidden, not mounted over).
PROTECTED = tuple(p for p in SYSTEM_PATHS if p not in ("/var", "/root"))


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
    shell: str  # a POSIX sh, which opens the seccomp filter's fd for bwrap
    user_namespace: bool  # True when the server is not root: bwrap needs --unshare-user
    hidden: tuple[Path, ...] = ()  # e.g. $TRAINYARD_HOME
    # Tasks may make user namespaces (task_user_namespaces); else, as root, this seccomp
    # filter keeps them from it (None: allowed, not root, or a machine it does not know).
    allow_userns: bool = False
    userns_filter: bytes | None = None

    def with_hidden(self, *paths: Path) -> Sandbox:
        return replace(self, hidden=(*self.hidden, *paths))


def find_sandbox(
    mode: SandboxMode, hidden: Sequence[Path] = (), *, as_root: bool | None = None, allow_userns: bool = False
) -> tuple[Sandbox | None, str]:
    """The sandbox to use for ``mode``, and why there is none when there is none.

    ``auto`` uses bubblewrap when it is installed and works here (probed once, now);
    ``bwrap`` insists on it (ValueError with the reason when it cannot work); ``none``
    never sandboxes. ``allow_userns``: tasks may make user namespaces.
    """
    if mode not in SANDBOX_MODES:
        raise ValueError(f"task sandbox must be one of {', '.join(SANDBOX_MODES)}; got {mode!r}")
    if mode == "none":
        return None, "the task sandbox is turned off (task_sandbox=none)"
    root = os.geteuid() == 0 if as_root is None else as_root
    sandbox, reason = _usable_bwrap(root, tuple(Path(p).absolute() for p in hidden), allow_userns)
    if sandbox is None and mode == "bwrap":
        raise ValueError(f"task_sandbox=bwrap, but bubblewrap cannot be used here: {reason}")
    return sandbox, reason


def _usable_bwrap(as_root: bool, hidden: tuple[Path, ...], allow_userns: bool) -> tuple[Sandbox | None, str]:
    bwrap, env, shell = shutil.which("bwrap"), shutil.which("env"), shutil.which("sh")
    if bwrap is None:
        return None, "bubblewrap (bwrap) is not installed; on Debian: apt-get install bubblewrap"
    if env is None or shell is None:
        return None, "coreutils' env or sh is not on PATH"
    sandbox = Sandbox(bwrap, env, shell, user_namespace=not as_root, hidden=hidden,
                      allow_userns=allow_userns,
                      userns_filter=None if allow_userns or not as_root else user_namespace_filter())
    probe = [*_namespaces(sandbox), "--tmpfs", "/tmp", "--", env, "true"]
    try:
        with tempfile.TemporaryDirectory() as scratch:
            if sandbox.userns_filter is not None:  # as the tasks get it: it must work too
                probe = _with_filter(sandbox, probe, Path(scratch))
            done = subprocess.run(probe, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_SECONDS,
                                  check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{bwrap} could not be run: {exc}"
    if done.returncode != 0:
        why = done.stderr.strip() or f"exit status {done.returncode}"
        if not as_root:
            why += " (as a non-root user bwrap needs unprivileged user namespaces)"
        elif sandbox.userns_filter is not None:
            why += " (with the seccomp filter that keeps tasks from making user namespaces; task_user_namespaces" \
                   ": true runs it without)"
        return None, f"{bwrap} does not work here: {why}"
    return sandbox, ""


def _namespaces(sandbox: Sandbox, root: Sequence[str] | None = None) -> list[str]:
    """bwrap, its namespaces and its root: ``root`` (``_root_entries``), or the host's ``/``
    as a whole, with a private /proc (the probe's)."""
    argv = [sandbox.bwrap]
    if sandbox.user_namespace:
        argv += ["--unshare-user", *([] if sandbox.allow_userns else ["--disable-userns"])]
    # No --die-with-parent: a task outlives its supervisor, as an unsandboxed one does.
    argv += ["--unshare-pid", "--unshare-ipc"]
    return [*argv, "--dev-bind", "/", "/", "--proc", "/proc"] if root is None else [*argv, *root]


def default_starter() -> tuple[str, ...]:
    """The task's start as this process would run it: this interpreter, isolated, on the
    installed ``sandboxjoin`` (the backend runs the supervisor's private copy instead)."""
    assert sandboxjoin.__file__ is not None
    return (real_interpreter(), "-I", "-S", sandboxjoin.__file__)


def sandbox_argv(
    sandbox: Sandbox,
    command: Sequence[str],
    *,
    hidden: Sequence[Path],
    work_dir: Path,
    shm_dir: Path,
    stop_file: Path,
    spec_file: Path,
    bound: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    mounts: Sequence[StorageMount] = (),
    storage_paths: Sequence[Path] = (),
    identity: Identity | None = None,
    starter: Sequence[str] | None = None,
    hosts_file: Path | None = None,
) -> list[str]:
    """The argv that runs ``command`` in the sandbox, in ``work_dir``, with the environment
    of ``spec_file`` (a JSON object whose ``env`` is the task's, in ``stop_file``'s folder):
    the argv itself must be run with ``LAUNCH_ENV``, never the task's environment.

    ``hidden`` adds to the sandbox's own hidden paths; ``work_dir``, ``shm_dir`` (mounted
    on /dev/shm) and ``bound`` (read-only: e.g. the secrets dir and the script) are bound
    back at their own paths, and ``writable`` (e.g. the job's directory) writable, over them.
    ``storage_paths`` (every storage's path on the node) are hidden like ``hidden``, and so
    is each mount's root; ``mounts`` are then bound at their targets from the descriptors
    ``mount_fds`` numbers (the supervisor opens them). ValueError for a target that may not
    be used (see the module docstring). ``stop_file`` is the file a stop request creates before the
    task's group is signalled; its folder is bound read-only too (see ``_STOP_GUARD``).
    ``identity`` is who the task becomes when bwrap runs as root (required then).
    ``starter`` is how the task's start is run (``default_starter``'s form: an interpreter,
    its options, the ``sandboxjoin`` file, which is bound read-only at its own path).
    ``hosts_file`` (root's, made before the sandbox starts) is bound read-only on
    ``/etc/hosts``: the host names an elastic job's workers know each other by
    (``wiring.agent_names``).
    """
    if not sandbox.user_namespace and identity is None:
        raise ValueError("a sandbox entered as root needs the task's identity to drop to")
    if spec_file.parent != stop_file.parent:
        raise ValueError("the task's spec file must lie beside its stop file (the folder the sandbox binds)")
    starter = list(starter or default_starter())
    bound = [*bound, Path(starter[-1])]
    # Only what exists: a missing mount point outside the sandbox's own tmpfs would be made on the host.
    covers = _outermost([Path(p) for p in (*sandbox.hidden, *hidden, *storage_paths, *(m.root for m in mounts))
                         if os.path.isdir(p)])
    own = [stop_file.parent, work_dir, shm_dir, *writable, *bound]
    tmpfs = [*covers, *map(Path, _SCRATCH)]
    _check_targets(sandbox, mounts, own, starter=starter, hidden=[*sandbox.hidden, *hidden])
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
    if hosts_file is not None:
        argv += ["--ro-bind", str(hosts_file), "/etc/hosts"]
    argv += ["--chdir", str(work_dir), "--", sandbox.env, f"--default-signal={_PASSED_SIGNALS}"]
    argv += [*starter, "--stop", str(stop_file), "--spec", str(spec_file), "--cwd", str(work_dir)]
    if identity is not None:
        argv += ["--drop", _ids(identity)]
    argv.append("--")
    if sandbox.userns_filter is not None:
        argv = _with_filter(sandbox, argv, stop_file.parent)
    # bwrap itself must outlive them (see the module docstring): ignored from exec on.
    return [sandbox.env, f"--ignore-signal={_PASSED_SIGNALS}", *argv, *command]


def _check_targets(sandbox: Sandbox, mounts: Sequence[StorageMount], own: Sequence[Path], *,
                   starter: Sequence[str] = (), hidden: Sequence[Path] = ()) -> None:
    """Refuse a mount that would land at, over or under what root runs from (the system's
    folders, the sandbox's own programs, the task's start: its interpreter, that
    interpreter's library and the ``sandboxjoin`` file), at, over or under what the sandbox
    hides (the server's home, the task state), at, over or inside the task's own folders, or
    inside another mount: a link there could send it anywhere."""
    programs = [sandbox.bwrap, sandbox.env, sandbox.shell, *starter[:1], *starter[-1:]]
    protected = [*PROTECTED, *{os.path.dirname(os.path.realpath(p)) for p in programs},
                 *{os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}]
    targets = [str(m.target) for m in mounts]
    for index, (mount, target) in enumerate(zip(mounts, targets, strict=True)):
        where = f"storage {mount.root}{'/' + mount.sub if mount.sub else ''} cannot be mounted at {target}"
        if not os.path.isabs(target) or os.path.normpath(target) != target or target == "/":
            raise ValueError(f"{where}: not a normalised absolute path")
        if clash := next((p for p in protected if inside(target, p) or inside(p, target)), None):
            raise ValueError(f"{where}: the system and the sandbox run from {clash}")
        # The task's own folders lie inside what is hidden (the work root): said first, as such.
        if clash := next((str(p) for p in own if inside(target, str(p)) or inside(str(p), target)), None):
            raise ValueError(f"{where}: it is (inside) the task's own {clash}")
        if clash := next((str(p) for p in hidden if inside(target, str(p)) or inside(str(p), target)), None):
            raise ValueError(f"{where}: the sandbox hides {clash} (the server's files, the task state)")
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


def _with_filter(sandbox: Sandbox, argv: list[str], folder: Path) -> list[str]:
    """``argv`` (bwrap's) with the seccomp filter, written to ``folder`` (root's: the task's
    directory), on the fd a shell opens for bwrap; the shell execs bwrap, in its place."""
    assert sandbox.userns_filter is not None and argv[0] == sandbox.bwrap
    path = folder / USERNS_FILTER_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, sandbox.userns_filter)
    finally:
        os.close(fd)
    return [sandbox.shell, "-c", _WITH_FILTER, str(path), argv[0], "--seccomp", str(_FILTER_FD), *argv[1:]]


def enter_argv(joiner: Sequence[str], spec_file: Path, work_dir: str, command: Sequence[str], *,
               bwrap: tuple[int, int] | None, identity: Identity | None, block_userns: bool) -> list[str]:
    """The argv that runs ``command`` in a running task (``sandboxjoin``, run by the
    server's interpreter, is ``joiner``): in the sandbox of ``bwrap`` (its pid and start
    time, as recorded at launch), whose init's user, mount, PID and IPC namespaces it
    enters, so the command sees the task's files, /tmp, /dev/shm and processes, in
    ``work_dir``; as ``identity`` (the task's account, dropped to by the joiner itself), with
    the environment of ``spec_file`` (the task's spec.json); ``block_userns``: with the
    seccomp filter that keeps the task from making user namespaces."""
    argv = [*joiner, "--spec", str(spec_file), "--cwd", work_dir]
    if bwrap is not None:
        argv += ["--sandbox", f"{bwrap[0]}:{bwrap[1]}"]
    if identity is not None:
        argv += ["--drop", _ids(identity)]
    if block_userns:
        argv.append("--no-userns")
    return [*argv, "--", *command]


def _ids(identity: Identity) -> str:
    """``sandboxjoin``'s ``--drop`` value: ``UID:GID:GROUP,GROUP…``."""
    return f"{identity.uid}:{identity.gid}:{','.join(str(g) for g in identity.groups)}"


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
