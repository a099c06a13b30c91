"""Run a command in a running task as the task runs (``yard exec``, ``yard shell``), and
start the task itself in its sandbox: ``python -I -S sandboxjoin.py [OPTIONS] -- CMD
[ARGS...]`` enters the task's sandbox (when ``--sandbox`` names one), drops to the task's
account (``--drop``), changes to ``--cwd`` and runs CMD with the task's environment (read
from ``--spec``, the task's ``spec.json``); it exits as CMD did.

``--stop FILE``: the task's start, the last step of its sandbox's command line
(``sandbox.sandbox_argv``), run by bwrap inside the sandbox it made, in place of the
shell's stop guard and util-linux ``setpriv`` that were there. It exits 143 (as a shell
killed by SIGTERM) when the stop file exists, else drops (``--drop``) and execs CMD in
this process, which bwrap waits for, with the task's environment. Everything before it
(``env``, bwrap, this interpreter) runs with a fixed environment (``sandbox.LAUNCH_ENV``),
as root when the server is root: the job's environment reaches CMD alone, after the drop.
The same ``drop`` as ``yard exec``'s.

Which namespaces: those of the **sandbox's init**, never of a process of the task.
``--sandbox PID:START`` names bwrap (the process the supervisor recorded at launch, checked
by its start time, so a recycled PID is never taken for it); bwrap's one child is the init
of the sandbox's PID namespace, made by bwrap before the task ran, in the mount, PID and IPC
namespaces bwrap made: the task cannot change them, nor make another process bwrap's child.
A process of the task could make its own user and mount namespace (where user namespaces
are allowed) and cover any file there: joining it would run, as root, what the task put
there. Each process is held by a pidfd from before its ``/proc`` entries are read until
its namespaces are open, so a PID that is recycled meanwhile is noticed, not joined.

Why not util-linux's ``nsenter``: a sandbox that bwrap made without root
(``--unshare-user --disable-userns``) has two user namespaces: the outer one owns its
mount, PID and IPC namespaces, and the task runs in a nested one. ``nsenter --user`` enters
the nested one first, where it holds no privilege over the outer one's namespaces, and
fails. So here the order is: the user namespace that owns the init's IPC namespace
(``NS_GET_USERNS``; nothing when that is ours, as for a sandbox made by root), then IPC,
mount and PID, then the init's own user namespace; then a fork (a PID namespace is entered
by the children).

Nothing that runs as root after the join comes from the sandbox's file system: this
process imports nothing after it, and the privilege drop is done here (``--drop``: groups,
gid, uid; no capabilities, bounding set and ambient included; no new privileges), not by
a program looked up in the joined mount namespace. Only then is CMD looked up and run, as
the task's account. ``--no-userns`` installs the sandbox's seccomp filter (below) before
that, so the command, like the task, cannot make user namespaces.

The environment of this process is not the task's: a root process given the job's env
would load its ``LD_PRELOAD`` (or ``LD_LIBRARY_PATH``, ``LD_AUDIT``, ``GCONV_PATH``...).
CMD gets the task's env (with ``PWD``, and ``TERM`` from here when the task has none),
and only CMD, with the signals Python ignores (SIGPIPE, SIGXFSZ) back to their defaults.

The filter (``user_namespace_filter``): classic BPF for ``seccomp(2)`` as bubblewrap's
``--seccomp FD`` and ``PR_SET_SECCOMP`` take it, the practice of Docker's and Flatpak's
profiles: ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` fail with EPERM; ``clone3``
(whose flags are in memory a filter cannot read) fails with ENOSYS, so that libc falls back
to ``clone``; ``setns`` into a user namespace (or of any type, ``nstype`` 0) fails with
EPERM. x86_64 (with its i386 and x32 system calls) and aarch64 (with arm); another
architecture's call is killed.

Stdlib only, so that the server's interpreter runs it isolated (``-I -S``: no ``PYTHON*``
variables, no site-packages, not the current directory on the path), for exec from the
installed package, for a task's start from the supervisor's private copy (``launcher``),
bound read-only into the sandbox; the sandbox module imports the filter from here. At a
task's start this interpreter and its standard library come from the sandbox's file
system, as bwrap made it before anything of the task ran: the task cannot change it then;
what could is a storage mounted over a system path, which the rule on ``mountPath``
(issue 27, finding 1) keeps out.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import select
import signal
import struct
import sys

# Stdlib-only and run isolated: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

NS_GET_USERNS = 0xB701  # linux/nsfs.h: _IO(0xb7, 0x1)
ORDER = ("ipc", "mnt", "pid")

# --- the seccomp filter --------------------------------------------------------------

CLONE_NEWUSER = 0x10000000
_LD_W_ABS, _JEQ_K, _JSET_K, _AND_K, _RET_K = 0x20, 0x15, 0x45, 0x54, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # struct seccomp_data; an argument's low 32 bits (little-endian)
_X32_BIT = 0x40000000
# AUDIT_ARCH_*: (clone, unshare, clone3, setns) system call numbers.
_ARCHES = {
    "x86_64": (0xC000003E, (56, 272, 435, 308)),
    "i386": (0x40000003, (120, 310, 435, 346)),
    "aarch64": (0xC00000B7, (220, 97, 435, 268)),
    "arm": (0x40000028, (120, 337, 435, 375)),
}
_MACHINES = {"x86_64": ("x86_64", "i386"), "amd64": ("x86_64", "i386"), "aarch64": ("aarch64", "arm"),
             "arm64": ("aarch64", "arm")}


def user_namespace_filter(machine: str | None = None) -> bytes | None:
    """The filter's ``struct sock_filter`` array for ``machine`` (default: this one's), or
    None for a machine it does not know."""
    arches = _MACHINES.get((machine or platform.machine()).lower())
    if arches is None:
        return None
    program: list[tuple[int, int | str, int | str, int]] = [(_LD_W_ABS, 0, 0, _ARCH)]
    program += [(_JEQ_K, arch, 0, _ARCHES[arch][0]) for arch in arches]
    program.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    labels: dict[str, int] = {}
    for arch in arches:
        labels[arch] = len(program)
        program.append((_LD_W_ABS, 0, 0, _NR))
        if arch == "x86_64":  # an x32 call is the same call with this bit set
            program.append((_AND_K, 0, 0, 0xFFFFFFFF & ~_X32_BIT))
        clone, unshare, clone3, setns = _ARCHES[arch][1]
        program += [(_JEQ_K, "enosys", 0, clone3), (_JEQ_K, "flags", 0, unshare), (_JEQ_K, "flags", 0, clone),
                    (_JEQ_K, "setns", 0, setns), (_RET_K, 0, 0, _RET_ALLOW)]
    labels["flags"] = len(program)
    program += [(_LD_W_ABS, 0, 0, _ARG0), (_JSET_K, "eperm", 0, CLONE_NEWUSER), (_RET_K, 0, 0, _RET_ALLOW)]
    labels["setns"] = len(program)
    program += [(_LD_W_ABS, 0, 0, _ARG1), (_JEQ_K, "eperm", 0, 0), (_JSET_K, "eperm", 0, CLONE_NEWUSER),
                (_RET_K, 0, 0, _RET_ALLOW)]
    labels["eperm"] = len(program)
    program.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    labels["enosys"] = len(program)
    program.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))

    def offset(at: int, target: int | str) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(struct.pack("=HBBI", code, offset(at, jt), offset(at, jf), k)
                    for at, (code, jt, jf, k) in enumerate(program))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


def install_filter(libc: ctypes.CDLL, program: bytes) -> None:
    """Set no-new-privileges, then install ``program`` on this thread (and what it runs)."""
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("cannot set no-new-privileges")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise _error("cannot install the sandbox's seccomp filter")


# --- finding the sandbox's init ------------------------------------------------------


def _error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, start_time)`` of ``pid`` (fields 4 and 22 of /proc/PID/stat), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[1]), int(fields[19])


def _alive(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` has not exited (a pidfd is readable once it has)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return not poller.poll(0)


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None and stat[0] == pid:
                found.append(int(name))
    return found


def find_init(pid: int, started: int) -> int | None:
    """The sandbox's init: the one child of bwrap ``(pid, started)``, in another PID
    namespace, once it has started the task (its mounts are done then); None when bwrap is
    not that process, or its sandbox is not up."""
    held = _hold_init(pid, started)
    if held is None:
        return None
    for fd in held[1:]:
        os.close(fd)
    return held[0]


def _hold_init(pid: int, started: int) -> tuple[int, int, int] | None:
    """``(init's pid, bwrap's pidfd, init's pidfd)``, each checked while held."""
    held: list[int] = []
    try:
        held.append(os.pidfd_open(pid))
        stat = _stat(pid)
        children = _children(pid)
        if stat is None or stat[1] != started or len(children) != 1:
            raise OSError(errno.ESRCH, "not the task's bwrap, or no sandbox yet")
        init = children[0]
        held.append(os.pidfd_open(init))
        stat = _stat(init)
        if (stat is None or stat[0] != pid or not _children(init)
                or os.readlink(f"/proc/{init}/ns/pid") == os.readlink(f"/proc/{pid}/ns/pid")
                or not all(_alive(fd) for fd in held)):
            raise OSError(errno.ESRCH, "not the sandbox's init, or the task not started yet")
    except OSError:
        for fd in held:
            os.close(fd)
        return None
    return init, held[0], held[1]


# --- joining -------------------------------------------------------------------------


def _setns(libc: ctypes.CDLL, fd: int, what: str) -> None:
    if libc.setns(fd, 0) != 0:
        raise _error(f"cannot enter the task's {what} namespace")


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def join(libc: ctypes.CDLL, pid: int, started: int) -> None:
    """Enter the namespaces of the init of bwrap ``(pid, started)``'s sandbox, in the
    module docstring's order."""
    # Read before the mount namespace changes: /proc there is the sandbox's, without this process.
    own_user = _identity(os.stat("/proc/self/ns/user"))
    held = _hold_init(pid, started)
    if held is None:
        raise OSError(errno.ESRCH, "the task's sandbox is not running (or not up yet)")
    init, *pidfds = held
    fds: dict[str, int] = {}
    try:
        for name in (*ORDER, "user"):
            fds[name] = os.open(f"/proc/{init}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
        # Still alive, so what was opened is theirs, not a process that took a PID over.
        if not all(_alive(fd) for fd in pidfds):
            raise OSError(errno.ESRCH, "the task's sandbox ended")
        owner = fcntl.ioctl(fds["ipc"], NS_GET_USERNS)
        current = own_user
        if _identity(os.fstat(owner)) != current:  # setns into one's own user namespace fails
            _setns(libc, owner, "owning user")
            current = _identity(os.fstat(owner))
        os.close(owner)
        for name in ORDER:
            _setns(libc, fds[name], name)
        if _identity(os.fstat(fds["user"])) != current:
            _setns(libc, fds["user"], "user")
    finally:
        for fd in (*fds.values(), *pidfds):
            os.close(fd)


def drop(libc: ctypes.CDLL, uid: int, gid: int, groups: list[int], last_cap: int) -> None:
    """To the task's account, as setpriv ``--reuid --regid --groups --inh-caps=-all
    --bounding-set=-all --no-new-privs`` does; OSError when any part fails."""
    for cap in range(last_cap + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise _error(f"cannot drop capability {cap} from the bounding set")
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise _error("cannot clear the ambient capabilities")
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from root: permitted and effective capabilities go
    header = ctypes.create_string_buffer(struct.pack("=Ii", _CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(24)  # effective, permitted, inheritable; two words each
    if libc.capset(header, data) != 0:
        raise _error("cannot clear the inheritable capabilities")
    if libc.capget(header, data) != 0 or data.raw != bytes(24):
        raise OSError(errno.EPERM, "capabilities are left after the drop")
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(errno.EPERM, f"could not switch to uid {uid}, gid {gid}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _error("cannot set no-new-privileges")


def _execvpe(command: list[str], env: dict[str, str]) -> OSError:
    """Exec ``command``, looked up in ``env``'s PATH as a shell does; the error when none ran.
    Not ``os.execvpe``: it imports a module, and after the join that would come from the
    sandbox's file system."""
    if "/" in command[0]:
        folders = [""]
    else:
        folders = env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":")
    error = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    for folder in folders:
        path = command[0] if not folder and "/" in command[0] else f"{folder or '.'}/{command[0]}"
        try:
            os.execve(path, command, env)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR) or error.errno == errno.ENOENT:
                error = exc
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                break
    return error


# --- a task's storages, opened for bwrap's --bind-fd ----------------------------------


def open_inside(root: str, sub: str, what: str = "storage") -> int:
    """A descriptor (O_PATH) of the folder ``sub`` inside the folder ``root``: ``root``
    itself (an admin's path) as it resolves, then each part of ``sub`` with no link followed
    and nothing but a folder accepted, so that nothing a user put in the storage can lead
    out of it, or to a file. ValueError saying which part is not a folder."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise ValueError(f"{what}: {root} cannot be opened on this node: {exc.strerror}") from None
    walked = root
    for part in sub.split("/") if sub else ():
        walked = f"{walked}/{part}"
        try:
            if part in ("", ".", ".."):
                raise OSError(0, "not a plain name")
            inner = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise ValueError(f"{what}: subPath {sub!r}: {walked} is not a folder inside the storage (a subPath names a "
                             f"folder, reached without a link; {exc.strerror})") from None
        os.close(fd)
        fd = inner
    return fd


def open_mount_fds(plan: list[list[Any]]) -> None:
    """Open each ``[fd, root, sub]`` of the spec's ``mount_fds`` (``open_inside``) on ``fd``,
    inherited by bwrap, which binds it (``--bind-fd``): what is mounted is the folder
    opened here, whatever its path leads to by the time bwrap runs."""
    if not plan:
        return
    opened = [open_inside(str(root), str(sub)) for _, root, sub in plan]
    top = max(int(fd) for fd, _, _ in plan) + 1
    # Above every target first: one just opened may hold a number another is to take.
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in opened]
    for fd in opened:
        os.close(fd)
    for (target, _, _), fd in zip(plan, moved, strict=True):
        os.dup2(fd, int(target), inheritable=True)
        os.close(fd)


USAGE = ("usage: sandboxjoin.py --spec SPEC_JSON --cwd DIR [--sandbox PID:START | --stop STOP_FILE] "
         "[--drop UID:GID:GROUPS] [--no-userns] -- CMD [ARGS...]")
STOPPED = 128 + signal.SIGTERM  # what the task's start exits with when a stop came first

# Said beside exit 126 or 127 of a task that ran in the sandbox: the usual cause there is a
# program, or a virtual environment's Python (which links to the Python it was made from, e.g.
# pyenv's under /root), that the sandbox hides.
SANDBOX_NOT_FOUND_HINT = ("in its sandbox a task sees neither /root nor this machine's /tmp: a program or a "
                          "virtual environment's Python kept there (or made from a Python there, as pyenv's) is "
                          "hidden; use one every account can run, or an environment (yard env)")
_OPTIONS = ("--spec", "--cwd", "--sandbox", "--stop", "--drop")


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    at = 1
    while at < len(argv) and argv[at] != "--":
        name = argv[at]
        if name == "--no-userns":
            options[name] = ""
            at += 1
        elif name in _OPTIONS and at + 1 < len(argv):
            options[name] = argv[at + 1]
            at += 2
        else:
            raise ValueError(f"unknown option {name!r}")
    command = argv[at + 1:]
    if not command or "--spec" not in options or "--cwd" not in options:
        raise ValueError("a command, --spec and --cwd are required")
    if "--sandbox" in options and "--stop" in options:
        raise ValueError("--sandbox joins a running task, --stop starts one: not both")
    return options, command


def main(argv: list[str]) -> int:
    try:
        options, command = _options(argv)
        sandbox = [int(n) for n in options["--sandbox"].split(":")] if "--sandbox" in options else None
        uid, gid, *rest = options["--drop"].split(":") if "--drop" in options else ("", "", "")
        groups = [int(g) for g in rest[0].split(",") if g] if rest else []
        ids = (int(uid), int(gid), groups) if uid else None
        if sandbox is not None and len(sandbox) != 2:
            raise ValueError("--sandbox takes PID:START")
    except ValueError as exc:
        print(f"{USAGE}\n{exc}", file=sys.stderr)
        return 2
    # A stop that came while bwrap set up (it ignores SIGTERM): the task never starts.
    if "--stop" in options and os.path.exists(options["--stop"]):
        return STOPPED
    libc = ctypes.CDLL(None, use_errno=True)
    # All that is read or resolved as root happens here, before the join.
    for name in ("setns", "prctl", "capset", "capget"):
        getattr(libc, name)
    try:
        with open(options["--spec"], encoding="utf-8") as f:
            spec = json.load(f)
        term = {"TERM": os.environ["TERM"]} if "TERM" in os.environ else {}
        env = {**term, **spec["env"], "PWD": options["--cwd"]}
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last_cap = int(f.read())
        program = None
        if "--no-userns" in options:
            program = user_namespace_filter()
            if program is None:
                raise OSError(errno.ENOSYS, f"no seccomp filter for this machine ({platform.machine()})")
        if sandbox is not None:
            join(libc, *sandbox)
    except (OSError, KeyError, ValueError) as exc:
        print(f"trainyard: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 126
    if "--stop" in options:  # the task's start: it is this process, bwrap's to wait for
        _become(libc, ids, last_cap, program, options["--cwd"], command, env)
    child = os.fork()  # a PID namespace is entered by the children
    if child == 0:
        _become(libc, ids, last_cap, program, options["--cwd"], command, env)
    # A Ctrl-C at a terminal reaches the command's whole group, this process included: the
    # command decides what it means; this one only reports how the command ended.
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(child, os.WUNTRACED)
        except ChildProcessError:
            return 125
        if os.WIFSTOPPED(status):
            continue
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _become(libc: ctypes.CDLL, ids: tuple[int, int, list[int]] | None, last_cap: int, program: bytes | None,
            cwd: str, command: list[str], env: dict[str, str]) -> NoReturn:
    """Drop to ``ids`` (uid, gid, groups), install ``program`` (the filter), change to
    ``cwd``, exec ``command`` with ``env``; never returns (126: the drop failed, 127: no
    command ran)."""
    try:
        if ids is not None:
            drop(libc, *ids, last_cap)
        if program is not None:
            install_filter(libc, program)
        os.chdir(cwd)
    except OSError as exc:
        print(f"trainyard: {exc.strerror or exc}", file=sys.stderr)
        os._exit(126)
    # Python ignores these; an exec'd program expects the defaults (a shell pipeline's
    # writer dies of SIGPIPE), and an ignored signal stays ignored across exec.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    failed = _execvpe(command, env)
    print(f"trainyard: cannot run {command[0]}: {failed.strerror or failed}", file=sys.stderr)
    os._exit(127)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
