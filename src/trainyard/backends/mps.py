"""Enforced GPU shares: one NVIDIA MPS control daemon per user per node (issue 36).

A task given part of a GPU (``gpu: 0.25``) gets at most that part of the device's memory,
and, where the admin enables it (``gpu_share_threads``), of its compute, through NVIDIA's
Multi-Process Service: its CUDA processes are MPS clients of a server of their owner's,
whose per-client limits Trainyard sets.

What MPS does, as NVIDIA documents it (``nvidia-cuda-mps-control(1)``, "Multi-Process
Service" guide): a CUDA program whose ``CUDA_MPS_PIPE_DIRECTORY`` holds a live control
daemon's pipes becomes a client; the daemon starts an MPS server with the client's uid
(one server at a time per daemon: a client of another uid waits until the running server
has no clients left), and the server runs the clients' work in one shared GPU context.
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``<device>=<size>,...``) and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` in a client's environment limit that client; they can
only lower what the daemon sets (``set_default_device_pinned_mem_limit``,
``set_default_active_thread_percentage`` for the next server; ``set_device_pinned_mem_limit``
and ``set_active_thread_percentage`` for a running one). An allocation past the limit fails
in the client with ``cudaErrorMemoryAllocation`` (PyTorch: ``torch.OutOfMemoryError``).

So, per node and per Trainyard user (by the task account's uid and the user's name, both
checked: two users who share one account still get a daemon each, so they are never in one
GPU context either)::

    <root>/                  0711 root   beside the work dirs
      <uid>-<user>/          0711 root   the user cannot create, rename or replace anything here
        lock                 0600 root   flock: one acquire/release at a time
        holders/             0700 root   one file per task that holds the daemon (its waiter's pid)
        pipe/                0700 uid    CUDA_MPS_PIPE_DIRECTORY: the daemon's pipes and sockets
                                         (emptied by root before a daemon starts, after it ends)
        log/                 0700 uid    CUDA_MPS_LOG_DIRECTORY: its control.log and server.log

(A unix socket's path holds at most 107 bytes: keep the root short.)

Before the first shared task of a user starts on the node, ``acquire`` starts
``nvidia-cuda-mps-control -d`` *as that user's account* with those two directories (so
two users never share a daemon, a server or a GPU context: another user's task cannot
open ``pipe/``; and, when root starts it, in a mount namespace where the root holds the
user's own folder alone: ``_as_user``), then sets the daemon's limits to the user's whole
holding on each device (the sum of their tasks' shares there): a task that lowers or drops
the limit variables but stays a client still cannot take more than its owner holds. (One that drops
``CUDA_MPS_PIPE_DIRECTORY``, or points it at a folder with no daemon, is no client at all:
as NVIDIA documents, CUDA then runs as it would without MPS, and in the Default compute
mode beside the servers, with no limit. MPS holds honest and buggy programs to their share,
not a hostile one.) Each task's own client limits
(its share) are in its environment. After the user's last shared task on the node ends,
``release`` sends ``quit``, and then ends what is left of the daemon, found by its uid and
its two directories in its environment (never by its pid file or socket, which the user's
tasks can rewrite or move). Whole-GPU tasks never see any of this.

Limits, said in the README's security model: the daemon runs as the user, so the user's
own tasks can talk to it (raise their limits up to the device, or quit it); the limits are
per client process; a fault in one client can affect the other clients of the same server
(the user's other tasks on that device). Different users' servers are separate processes
on the device, time-sliced by the driver (the device must be in the Default compute mode
for two users' servers to share it; in Exclusive-process mode the second waits).

On Slurm (``slurm/mpsstep``) the same daemon is one per user *per device*: the plan's
``visible`` (the device's UUID) becomes the daemon's ``CUDA_VISIBLE_DEVICES``, its root is
``<root>/<node>/gpu<N>``, and the task runner acquires and releases it as root on the node.

Stdlib only (the local backend's supervisor runs it from its private copy, ``launcher``;
Slurm's node step from the copy beside it in ``<state_dir>/bin``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import signal
import stat
import subprocess
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CONTROL = "nvidia-cuda-mps-control"
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
MEMORY_VARIABLE = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
THREADS_VARIABLE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
# The daemon writes its pid here (in the pipe directory), as NVIDIA documents.
PID_FILE = "nvidia-cuda-mps-control.pid"
WHOLE_MILLI = 1000
ROOT_MODE = 0o711
PRIVATE_MODE = 0o700
COMMAND_TIMEOUT_SECONDS = 30.0
NOT_ENFORCED = "its GPU share is not enforced"
# A log file of the daemon's past this is emptied (``cap_logs``): its control.log grows with
# every command a task of the user's sends it.
LOG_CAP_BYTES = 16 << 20
# What the control daemon and its commands run with: nothing of the server's or the job's.
_DAEMON_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,63}")  # core.names.USER_NAME (this module is stdlib only)


def share_mb(milli: int, memory_mb: int) -> int:
    """The MiB of a device of ``memory_mb`` that a share of ``milli`` thousandths may hold."""
    return max(1, milli * memory_mb // WHOLE_MILLI)


def thread_percentage(milli: int) -> int:
    """The active thread percentage of a share (rounded up, 1 to 100)."""
    return min(100, max(1, -(-milli // 10)))


def user_dir(plan: dict[str, Any]) -> str:
    """The user's folder under the root: ``<uid>-<user>`` (``plan["key"]``), checked again here
    (a uid and a Trainyard user name, nothing a path could be bent by)."""
    key = str(plan["key"])
    uid, dash, user = key.partition("-")
    if not (uid.isdigit() and int(uid) == plan["uid"] and (not dash or _USER.fullmatch(user))):
        raise ValueError(f"not a key of a user's MPS folder: {key!r}")
    return os.path.join(plan["root"], key)


def pipe_dir(plan: dict[str, Any]) -> str:
    return os.path.join(user_dir(plan), "pipe")


def log_dir(plan: dict[str, Any]) -> str:
    return os.path.join(user_dir(plan), "log")


def client_env(plan: dict[str, Any]) -> dict[str, str]:
    """The variables that make a task an MPS client of its owner's daemon, with its limits.

    ``plan["clients"]``: ``[device, MiB]`` per shared device, the device as the task names it
    (its UUID where NVML gives one: no doubt about numbering)."""
    env = {PIPE_VARIABLE: pipe_dir(plan),
           MEMORY_VARIABLE: ",".join(f"{device}={mb}M" for device, mb in plan["clients"])}
    if plan.get("threads") is not None:
        env[THREADS_VARIABLE] = str(plan["threads"])
    return env


def make_root(root: str) -> None:
    """The folder of every user's folder (``ROOT_MODE``, ours): made before any task starts, so
    that each task's sandbox can hide it all but the task's own pipe directory."""
    _make_dir(root, ROOT_MODE, os.geteuid(), None)


def prepare(plan: dict[str, Any]) -> None:
    """Make the user's directories (see the module docstring); as root when the user's uid is
    not ours. Refuses (OSError) a path that is not what it must be: a link, another owner's folder."""
    me = os.geteuid()
    _make_dir(plan["root"], ROOT_MODE, me, None)
    top = user_dir(plan)
    _make_dir(top, ROOT_MODE, me, None)
    _make_dir(os.path.join(top, "holders"), PRIVATE_MODE, me, None)
    for name in ("pipe", "log"):
        _make_dir(os.path.join(top, name), PRIVATE_MODE, plan["uid"], plan["gid"])


def acquire(plan: dict[str, Any], holder_pid: int) -> list[str]:
    """Hold the user's daemon for a task (its waiter is ``holder_pid``): start it if it is not
    running, set its limits to the user's holding; notes for the task's status (empty: fine)."""
    try:
        prepare(plan)
        with Locked(plan):
            holders = live_holders(plan)
            record = {"pid": holder_pid, "start": start_time(holder_pid), "devices": plan["devices"],
                      "threads": plan.get("threads")}
            _write_holder(plan, record)
            holders[plan["holder"]] = record
            if not _daemon_alive(plan):
                if not _daemon_processes(plan):  # (never a live daemon's sockets, whatever its pid file says)
                    clear_pipe_dir(plan)  # a new daemon meets nothing a task left there
                _control(plan, ["-d"], "")
            return _apply_limits(plan, holders)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return [f"{NOT_ENFORCED}: the MPS daemon of {plan['key']} could not start ({exc})"]


def release(plan: dict[str, Any]) -> list[str]:
    """The task no longer holds the daemon: ``quit`` it after the user's last task, else
    lower its limits to what the user still holds."""
    try:
        with Locked(plan):
            _remove_holder(plan, plan["holder"])
            holders = live_holders(plan)
            if not holders:
                end(plan)
                return []
            return _apply_limits(plan, holders)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return [f"the MPS daemon of {plan['key']} could not be told of the task's end ({exc})"]


def end(plan: dict[str, Any]) -> None:
    """``quit`` the user's daemon and end what is left of it (the caller holds the lock and
    found no holder). Told whatever the pid file (the user's) says: one that names no live
    process must not keep the daemon for ever. Where none answers, there was none to quit.
    Its processes are held (pidfds) from before ``quit``: one on its way out no longer shows
    its environment, and it has gone when this returns. Then nothing the user's tasks left in
    the pipe directory outlives it (``clear_pipe_dir``)."""
    held = _hold(_daemon_processes(plan))
    try:
        alive = _daemon_alive(plan)
        try:
            _control(plan, [], "quit\n")
        except (OSError, subprocess.SubprocessError):
            if not _end_strays(plan, held) and alive:
                raise
            return
        _end_strays(plan, held)
    finally:
        for handle in held.values():
            os.close(handle)
        clear_pipe_dir(plan)
        cap_logs(plan)


def cap_logs(plan: dict[str, Any]) -> None:
    """Empty each log file of the user's daemon past ``LOG_CAP_BYTES``: its ``control.log``
    and its servers' ``server.log`` (in a folder each, on recent drivers). The daemon writes
    them as the user, outside every task's memory limit, and logs each command it is sent
    (``nvidia-cuda-mps-control(1)``): a task looping commands to it would fill the folder's
    tmpfs (on Slurm, the node's ``/run``: every user's daemons', the system's) and the space
    would stay after the task. Root opens no link and empties only the user's plain files;
    it never raises (Slurm's keeper calls it each round, the end of a daemon calls it)."""
    try:
        top = os.open(log_dir(plan), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, ValueError):
        return
    try:
        for name in os.listdir(top):
            if _cap_file(top, name, plan["uid"]):
                continue
            try:
                folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            except OSError:
                continue
            try:
                for inner in os.listdir(folder):
                    _cap_file(folder, inner, plan["uid"])
            finally:
                os.close(folder)
    except OSError:
        pass
    finally:
        os.close(top)


def _cap_file(folder: int, name: str, uid: int) -> bool:
    """Empty ``name`` if it is a plain file of ``uid``'s past the cap; whether it is a plain file."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return False  # a folder, a link, a FIFO without a reader: nothing to empty here
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid and st.st_size > LOG_CAP_BYTES:
            os.ftruncate(fd, 0)
        return stat.S_ISREG(st.st_mode)
    except OSError:
        return True
    finally:
        os.close(fd)


def clear_pipe_dir(plan: dict[str, Any]) -> None:
    """Empty the user's pipe directory, before a daemon starts and after it ends.

    Their tasks write there (it is bound writable into their sandboxes) and it stays on the
    node between them: what they leave would hold the node's tmpfs (``/run``, every user's
    daemons' and the system's) after the step whose memory it was counted in, and the daemon,
    the user's account *outside* the sandbox, would write through a link planted there (its
    pid file, its sockets) to a file the sandbox hides. Root removes each entry through its
    folder's descriptor, never following a link; a folder's entries move up to the top one
    under a fresh name (depth costs no descriptors, a loop of links no recursion). A task of
    the user's that writes there meanwhile (another holder) only makes it take longer: it
    stops after ``COMMAND_TIMEOUT_SECONDS`` (OSError)."""
    try:
        top = os.open(pipe_dir(plan), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    deadline = time.monotonic() + COMMAND_TIMEOUT_SECONDS
    try:
        while _flatten_pass(top, deadline, plan):
            pass
    finally:
        os.close(top)


def _flatten_pass(top: int, deadline: float, plan: dict[str, Any]) -> bool:
    """One pass of ``clear_pipe_dir`` over the folder ``top`` (read as it goes: a folder of
    millions of names is never held in a list); whether it found any entry."""
    found = False
    moved = 0
    with os.scandir(top) as entries:
        for entry in entries:
            found = True
            name = entry.name
            if time.monotonic() > deadline:
                raise OSError(f"{pipe_dir(plan)} is still not empty after {COMMAND_TIMEOUT_SECONDS:g} s")
            if _remove_entry(top, name):
                continue
            try:
                folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=top)
            except OSError:
                continue  # gone, or no longer a folder: the next pass removes it
            try:
                with os.scandir(folder) as inside:
                    for inner in inside:
                        moved += 1
                        try:
                            os.rename(inner.name, f".gone-{time.monotonic_ns()}-{moved}", src_dir_fd=folder,
                                      dst_dir_fd=top)
                        except OSError:
                            pass  # its name is taken up there (the next pass tries another) or it went
            finally:
                os.close(folder)
    return found


def _remove_entry(folder: int, name: str) -> bool:
    """Unlink ``name`` (a link itself, never what it names) or remove it as an empty folder;
    False for a folder with entries."""
    try:
        os.unlink(name, dir_fd=folder)
    except IsADirectoryError:
        try:
            os.rmdir(name, dir_fd=folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
            return False
    except FileNotFoundError:
        pass
    return True


def _apply_limits(plan: dict[str, Any], holders: dict[str, dict[str, Any]]) -> list[str]:
    """The daemon's limits: on each device, what the user's tasks hold there in all."""
    memory: dict[str, int] = {}
    threads = 0
    for record in holders.values():
        for device, mb in record["devices"]:
            memory[str(device)] = memory.get(str(device), 0) + int(mb)
        threads += int(record.get("threads") or 0)
    servers = [int(word) for word in _control(plan, [], "get_server_list\n").split() if word.isdigit()]
    commands = [f"set_default_device_pinned_mem_limit {device} {mb}M" for device, mb in sorted(memory.items())]
    commands += [f"set_device_pinned_mem_limit {pid} {device} {mb}M"
                 for pid in servers for device, mb in sorted(memory.items())]
    if plan.get("threads") is not None:
        commands.append(f"set_default_active_thread_percentage {min(100, threads)}")
        commands += [f"set_active_thread_percentage {pid} {min(100, threads)}" for pid in servers]
    _control(plan, [], "".join(command + "\n" for command in commands))
    return []


def _control(plan: dict[str, Any], args: list[str], commands: str) -> str:
    """Run the control program as the user, with the user's pipe and log directories and
    nothing else of ours in its environment; its output. Raises OSError when it fails."""
    env = {"PATH": _DAEMON_PATH, PIPE_VARIABLE: pipe_dir(plan),
           LOG_VARIABLE: log_dir(plan), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if plan.get("visible"):  # a daemon of one device (Slurm's: ``slurm/mpsstep``), by its UUID
        env["CUDA_VISIBLE_DEVICES"] = str(plan["visible"])
    # Root, for the user's account: in a view of the user's own folder alone.
    start = _as_user(plan) if plan["uid"] != os.geteuid() else _default_signals
    done = subprocess.run([plan["control"], *args], input=commands.encode(), capture_output=True, env=env,
                          cwd="/", timeout=COMMAND_TIMEOUT_SECONDS, check=False, start_new_session=True,
                          preexec_fn=start)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        raise OSError(f"{os.path.basename(plan['control'])} {' '.join(args) or commands.split()[0]} "
                      f"exited with {done.returncode}: {said}")
    return str(done.stdout.decode(errors="replace"))


# What ``_as_user`` asks of the kernel (sched.h, linux/mount.h): the stdlib has no mount(2).
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC = 0x2, 0x4, 0x8, 0x20, 0x1000, 0x4000
_MS_SLAVE, _MS_NOSYMFOLLOW = 0x80000, 0x100


def _as_user(plan: dict[str, Any]) -> Any:
    """How root starts the control program for the user (its ``preexec_fn``): in a mount
    namespace of its own where the folder of every user's daemons (the plan's ``base``, else
    its ``root``) is an empty tmpfs but for this user's own folder, bound back; then as the
    user's account. Users who share one account (one uid) each have a
    daemon; without this, a link one's task put in their pipe directory (where the control
    program finds its daemon) sent root's commands, ``quit`` or limits, to the other's, and
    the daemon (which keeps the namespace) could reach the other's folders too."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    hide, own = str(plan.get("base") or plan["root"]), user_dir(plan)
    if os.path.commonpath([hide, own]) != hide:
        raise ValueError(f"{own} is not inside {hide}")
    uid, gid, groups = int(plan["uid"]), int(plan["gid"]), [int(g) for g in plan.get("groups") or []]

    def call(result: int) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))

    def start() -> None:  # in the child, before exec (one thread: the callers are single-threaded forks)
        _default_signals()
        call(libc.unshare(_CLONE_NEWNS))
        # A slave: the host's unmounts still reach it (a daemon pins no filesystem), ours stay here.
        call(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None))
        held = os.open(own, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)  # (this namespace's)
        call(libc.mount(b"tmpfs", hide.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, b"mode=0711"))
        umask = os.umask(0)
        os.makedirs(own, 0o711)  # in that tmpfs: passable, whatever the umask
        os.umask(umask)
        call(libc.mount(f"/proc/self/fd/{held}".encode(), own.encode(), None, _MS_BIND, None))
        os.close(held)
        # No link in the user's folder is followed there (Linux 5.10+; before, the emptying
        # at each start stands alone): one a task planted in its pipe directory while
        # another kept it from being emptied never sends the daemon's writes elsewhere.
        flags = _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV
        if libc.mount(None, own.encode(), None, flags | _MS_NOSYMFOLLOW, None) != 0:
            call(libc.mount(None, own.encode(), None, flags, None))
        os.setgroups(groups)
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

    return start


def _default_signals() -> None:
    # The waiter calls with its stop signals blocked; a daemon must not inherit that mask.
    # (The waiter is a fork with one thread: a preexec function is safe there.)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _daemon_alive(plan: dict[str, Any]) -> bool:
    """Whether the user's daemon runs: the pid in its pid file is a live process of the user's.
    (The file is the user's to write: it decides only whether to start one, never what to kill.
    Root opens it without following a link and without waiting, and reads it only if it is
    a plain file of the user's: never a FIFO that would hold the waiter, nor a device.)"""
    try:  # O_PATH opens nothing (no device's open, no FIFO's wait): what it is, then its content
        where = os.open(os.path.join(pipe_dir(plan), PID_FILE), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(where)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != plan["uid"]:
            return False
        fd = os.open(f"/proc/self/fd/{where}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            pid = int(os.read(fd, 32).strip() or b"0")
        finally:
            os.close(fd)
        return pid > 0 and os.stat(f"/proc/{pid}").st_uid == plan["uid"] and _running(pid)
    except (OSError, ValueError):
        return False
    finally:
        os.close(where)


def _daemon_processes(plan: dict[str, Any]) -> list[int]:
    """The processes of the user's uid that run with both of the daemon's directories in their
    environment, as ``_control`` starts it (its servers inherit it): the daemon, whatever its pid
    file (the user's) says and wherever its socket went. A process of the user's that sets both
    itself is the user's own to lose."""
    want = {f"{PIPE_VARIABLE}={pipe_dir(plan)}".encode(), f"{LOG_VARIABLE}={log_dir(plan)}".encode()}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _is_daemon(int(name), plan["uid"], want):
            found.append(int(name))
    return found


def _is_daemon(pid: int, uid: int, want: set[bytes]) -> bool:
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        with open(f"/proc/{pid}/environ", "rb") as f:
            return want <= set(f.read().split(b"\0")) and _running(pid)
    except OSError:
        return False


def _hold(pids: list[int]) -> dict[int, int]:
    """A pidfd for each of ``pids`` still there (a pidfd names one process, never a reused pid)."""
    held = {}
    for pid in pids:
        try:
            held[pid] = os.pidfd_open(pid)
        except OSError:
            continue
    return held


def _not_exited(held: dict[int, int], wait_seconds: float = 0.0) -> list[int]:
    """Those of ``held`` whose process has not exited (a pidfd reads ready once it has),
    waiting up to ``wait_seconds`` for the first change."""
    if not held:
        return []
    poller = select.poll()  # (not select(): a server's pidfd may be past FD_SETSIZE)
    for handle in held.values():
        poller.register(handle, select.POLLIN)
    ready = {handle for handle, _ in poller.poll(wait_seconds * 1000)}
    return [pid for pid, handle in held.items() if handle not in ready]


def _end_strays(plan: dict[str, Any], held: dict[int, int], wait_seconds: float = 5.0) -> bool:
    """After ``quit`` (answered or not): what is left of the user's daemon ends, SIGKILLed
    through a pidfd once it has had ``wait_seconds`` to go, and has exited when this returns:
    the processes ``held`` from before ``quit`` and any found since; whether there were any."""
    found = dict(held)
    extra: list[int] = []
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            for pid, handle in _hold([p for p in _daemon_processes(plan) if p not in found]).items():
                found[pid] = handle
                extra.append(handle)
            left = _not_exited(found)
            if not left or time.monotonic() >= deadline:
                break
            _not_exited({pid: found[pid] for pid in left}, 0.05)
        want = {f"{PIPE_VARIABLE}={pipe_dir(plan)}".encode(), f"{LOG_VARIABLE}={log_dir(plan)}".encode()}
        for pid in left:
            try:
                if _is_daemon(pid, plan["uid"], want):  # still that process: the pidfd holds it
                    signal.pidfd_send_signal(found[pid], signal.SIGKILL)
            except OSError:
                pass
        settle = time.monotonic() + 1.0  # SIGKILL is not instant: the process is still leaving
        while (left := _not_exited({pid: found[pid] for pid in left})) and time.monotonic() < settle:
            _not_exited({pid: found[pid] for pid in left}, 0.05)
        return bool(found)
    finally:
        for handle in extra:
            os.close(handle)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def start_time(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


class Locked:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.path = os.path.join(user_dir(plan), "lock")
        self.fd = -1

    def __enter__(self) -> Locked:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # and the lock with it


def live_holders(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tasks that hold the daemon; a holder whose waiter is gone (killed before it could
    release) is dropped here, so that a lost task does not keep the daemon for ever."""
    folder = os.path.join(user_dir(plan), "holders")
    found = {}
    for name in os.listdir(folder):
        try:
            with open(os.path.join(folder, name), "rb") as f:
                record = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if start_time(int(record.get("pid", 0))) == record.get("start") and record.get("start"):
            found[name] = record
        else:
            _remove_holder(plan, name)
    return found


def _write_holder(plan: dict[str, Any], record: dict[str, Any]) -> None:
    path = os.path.join(user_dir(plan), "holders", plan["holder"])
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(record).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _remove_holder(plan: dict[str, Any], name: str) -> None:
    try:
        os.unlink(os.path.join(user_dir(plan), "holders", name))
    except FileNotFoundError:
        pass


def _make_dir(path: str, mode: int, uid: int, gid: int | None) -> None:
    """``path`` a real folder (no link) with ``mode``, owned by ``uid`` (and ``gid``)."""
    try:
        os.mkdir(path, mode)
        if uid != os.geteuid() or gid is not None:
            os.chown(path, uid, -1 if gid is None else gid, follow_symlinks=False)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not (st.st_mode & 0o170000 == 0o040000) or st.st_uid != uid:
        raise OSError(f"{path} is not a folder owned by uid {uid}; remove it")
    if st.st_mode & 0o7777 != mode:
        os.chmod(path, mode)  # its parent is ours: nobody can swap it for a link meanwhile

