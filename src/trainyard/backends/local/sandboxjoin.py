"""Run a command inside a running task's sandbox (``yard exec``): ``python -I -S
sandboxjoin.py PID WORK_DIR CMD ARGS...`` joins the namespaces of process PID (one of the
task's, inside its sandbox), changes to WORK_DIR as the sandbox mounts it, and runs CMD
there; it exits as CMD did.

Why not util-linux's ``nsenter``: a sandbox that bwrap made without root
(``--unshare-user --disable-userns``) has two user namespaces: the outer one owns its
mount, PID and IPC namespaces, and the task runs in a nested one. ``nsenter --user`` enters
the task's (nested) one first, where it holds no privilege over the outer one's
namespaces, and fails. So here the order is: the user namespace that owns the task's IPC
namespace (``NS_GET_USERNS``; nothing when that is ours, as for a sandbox made by root),
then IPC, mount and PID, then the task's own user namespace; then a fork (a PID namespace
is entered by the children). Privileges gained in those user namespaces end at ``execve``
(the command's uid is not 0 in them); a server run as root drops to the task's account
with ``setpriv`` in the command line it gives after WORK_DIR.

Stdlib only, so that the server's interpreter runs it isolated (``-I -S``).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import sys

NS_GET_USERNS = 0xB701  # linux/nsfs.h: _IO(0xb7, 0x1)
ORDER = ("ipc", "mnt", "pid")


def _setns(libc: ctypes.CDLL, fd: int, what: str) -> None:
    if libc.setns(fd, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"cannot enter the task's {what} namespace: {os.strerror(error)}")


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def join(pid: int) -> None:
    """Enter process ``pid``'s namespaces, in the module docstring's order."""
    libc = ctypes.CDLL(None, use_errno=True)
    # Read before the mount namespace changes: /proc there is the sandbox's, without this process.
    own_user = _identity(os.stat("/proc/self/ns/user"))
    fds = {name: os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in (*ORDER, "user")}
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
    for fd in fds.values():
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or not argv[1].isdigit():
        print("usage: sandboxjoin.py PID WORK_DIR CMD [ARGS...]", file=sys.stderr)
        return 2
    pid, work_dir, command = int(argv[1]), argv[2], argv[3:]
    try:
        join(pid)
    except OSError as exc:
        print(f"trainyard: {exc.strerror or exc}", file=sys.stderr)
        return 126
    child = os.fork()
    if child == 0:
        try:
            os.chdir(work_dir)
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"trainyard: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        os._exit(127)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv))
