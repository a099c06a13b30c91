"""The per-task supervisor: runs one task detached, forwards stops, records its exit status.

Run as ``python -S -m trainyard.backends.local.supervisor TASK_DIR``; it imports only the
stdlib (and two stdlib-only modules beside it) because it sits on the submit→RUNNING path.

Sequence, chosen so that a crash at any moment leaves a state the backend can read
(see ``taskfiles`` for the files):

1. Install signal handlers, read ``spec.json``.
2. Claim the task by creating ``pid.json`` exclusively (a second supervisor for the same
   task gives up here). A claim with ``"task": null`` whose supervisor is dead means the
   task never ran.
3. With the stop signals blocked: fork the task process, put it in its own process group,
   and record it in ``pid.json``. The child waits on a pipe (the gate) and only execs bash
   after the record exists; if the supervisor dies first the child sees EOF and exits, so
   no task ever runs unrecorded.
4. Open the gate: the child execs ``bash --noprofile --norc script.sh`` with stdin from
   /dev/null and stdout+stderr appended to ``output.log``. When the spec names a ``user``
   the child first drops to it (groups, gid, uid; after joining its process group and
   redirecting its output, before exec) and runs the copy of the script at
   ``script_file``, since it cannot read the task directory.
5. On SIGTERM/SIGINT (a stop), SIGTERM the task's group and arm a timer; when it fires
   while the task still runs, SIGKILL the group.
6. When the task's main process exits, wait for it *without reaping* (its zombie keeps the
   group id from being reused), SIGKILL whatever is left of its group, wait until those are
   gone, reap it, then write ``exit.json`` durably.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from trainyard.backends.local import procfs, taskfiles

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_HANDLED = {*_STOP_SIGNALS, signal.SIGALRM, signal.SIGHUP}
_LEFTOVER_WAIT_SECONDS = 5.0
_EXEC_FAILED = 127  # what a shell reports for a command it could not run


def _iso(t: float) -> str:
    """``t`` (seconds since the epoch) as an ISO 8601 UTC timestamp."""
    micro = int((t % 1) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{micro:06d}+00:00"


class Supervisor:
    """Supervises the task of one task directory, from claim to exit record."""

    def __init__(self, task_dir: str) -> None:
        self.task_dir = task_dir
        self.grace_seconds = 30.0
        self.task_pid: int | None = None  # also the task's process-group id
        self.reaped = False
        self.stop_requested = False
        self.started_at = time.time()

    def path(self, name: str) -> str:
        return os.path.join(self.task_dir, name)

    def run(self) -> int:
        for stop_signal in _STOP_SIGNALS:
            signal.signal(stop_signal, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_grace_expired)
        # No terminal: a stray SIGHUP must not kill the supervisor (and lose the status).
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

        spec = taskfiles.read_json(self.path(taskfiles.SPEC))
        if spec is None:
            print(f"trainyard supervisor: no readable {taskfiles.SPEC} in {self.task_dir}", file=sys.stderr)
            return 2
        self.grace_seconds = float(spec.get("grace_seconds", self.grace_seconds))

        me = os.getpid()
        record: dict[str, object] = {
            "boot_id": procfs.boot_id(),
            "supervisor": {"pid": me, "start_time": procfs.start_time(me)},
            "task": None,
        }
        if not taskfiles.write_json(self.path(taskfiles.PID), record, exclusive=True):
            print("trainyard supervisor: the task is already claimed; exiting", file=sys.stderr)
            return 0
        try:
            started = self._start_task(spec, record)
        except OSError as exc:
            self._write_exit(_EXEC_FAILED, None, f"the supervisor could not start the task: {exc}")
            return 1
        if not started:
            self._write_exit(128 + signal.SIGTERM, signal.SIGTERM, "stopped before the task started")
            return 0
        exit_code, sig, message = self._wait_task()
        self._write_exit(exit_code, sig, message)
        return 0

    def _start_task(self, spec: dict[str, Any], record: dict[str, object]) -> bool:
        """Fork, record and release the task; False when a stop came before it started."""
        script_path = self.path(taskfiles.SCRIPT)
        fd = os.open(script_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, spec["script"].encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
        log_fd = os.open(
            self.path(taskfiles.OUTPUT_LOG),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
            0o644,
        )
        null_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        gate_r, gate_w = os.pipe()
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            # backend.stop writes stop.json before it reads pid.json; we wrote pid.json
            # before reading stop.json: at least one of us sees the other.
            if self.stop_requested or os.path.exists(self.path(taskfiles.STOP)):
                self.stop_requested = True
                return False
            pid = os.fork()
            if pid == 0:
                _exec_task(spec, spec.get("script_file") or script_path, gate_r, gate_w, log_fd, null_fd)
            try:
                os.setpgid(pid, pid)  # the child does it too; whoever is first wins the race
            except (PermissionError, ProcessLookupError):
                pass
            record["task"] = {"pid": pid, "pgid": pid, "start_time": procfs.start_time(pid)}
            taskfiles.write_json(self.path(taskfiles.PID), record)
            self.task_pid = pid
            self.started_at = time.time()
            try:
                os.write(gate_w, b"go")
            except BrokenPipeError:
                pass  # the child already died; _wait_task reports how
            return True
        finally:
            for fd in (gate_r, gate_w, log_fd, null_fd):
                os.close(fd)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)

    def _wait_task(self) -> tuple[int, int | None, str]:
        """Wait for the task, clean up its group; ``(exit_code, signal, message)``."""
        assert self.task_pid is not None
        pgid = self.task_pid
        # WNOWAIT leaves the main process a zombie: its pid, hence the group id, cannot be
        # reused while we kill the rest of the group.
        info = os.waitid(os.P_PID, self.task_pid, os.WEXITED | os.WNOWAIT)
        assert info is not None  # only None with WNOHANG
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + _LEFTOVER_WAIT_SECONDS
        leftovers = procfs.group_members(pgid)
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.01)
            leftovers = procfs.group_members(pgid)
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)  # no killpg once the id is free
        os.waitpid(self.task_pid, 0)
        self.reaped = True

        message = "Trainyard asked it to stop" if self.stop_requested else ""
        if leftovers:
            message = f"{message}; " if message else ""
            message += f"{len(leftovers)} process(es) of the task's group did not exit after SIGKILL"
        if info.si_code == os.CLD_EXITED:
            return info.si_status, None, message
        return 128 + info.si_status, info.si_status, message  # killed (or dumped core)

    def _on_stop(self, signum: int, frame: object) -> None:
        if self.stop_requested:
            return
        self.stop_requested = True
        if self.task_pid is None or self.reaped:
            return  # not started yet: _start_task sees the flag
        stop = taskfiles.read_json(self.path(taskfiles.STOP)) or {}
        grace = stop.get("grace_seconds", self.grace_seconds)
        if not isinstance(grace, (int, float)) or grace < 0:
            grace = self.grace_seconds
        self._signal_group(signal.SIGTERM)
        if grace > 0:
            signal.setitimer(signal.ITIMER_REAL, grace)
        else:
            self._signal_group(signal.SIGKILL)

    def _on_grace_expired(self, signum: int, frame: object) -> None:
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: int) -> None:
        if self.task_pid is None or self.reaped:
            return
        try:
            os.killpg(self.task_pid, sig)
        except ProcessLookupError:
            pass

    def _write_exit(self, exit_code: int, sig: int | None, message: str) -> None:
        record = {
            "exit_code": exit_code,
            "signal": sig,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(time.time()),
            "stopped": self.stop_requested,
            "message": message,
        }
        taskfiles.write_json(self.path(taskfiles.EXIT), record, durable=True)


def _exec_task(spec: dict[str, Any], script_path: str, gate_r: int, gate_w: int, log_fd: int, null_fd: int) -> None:
    """In the forked child: wait for the gate, then become bash running the script."""
    try:
        os.close(gate_w)
        os.setpgid(0, 0)
        for sig in _HANDLED:
            signal.signal(sig, signal.SIG_DFL)
        # Python ignores SIGPIPE and SIGXFSZ; an exec'd program expects the defaults.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if os.read(gate_r, 2) != b"go":
            os._exit(_EXEC_FAILED)  # the supervisor died before recording us: never run
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        user = spec.get("user")
        if user is not None:
            os.setgroups(user["groups"])
            os.setgid(user["gid"])
            os.setuid(user["uid"])  # as root: real, effective and saved ids; capabilities go
            if os.getuid() != user["uid"] or os.geteuid() != user["uid"]:
                raise PermissionError(f"could not switch to user {user['name']!r}")
        os.chdir(spec["cwd"])
        # The backend writes the whole command (a sandbox's included); older specs lack it.
        argv = spec.get("argv") or [spec["shell"], "--noprofile", "--norc", script_path]
        os.execve(argv[0], argv, spec["env"])
    except BaseException as exc:  # noqa: BLE001 - the child must never return to the supervisor
        try:
            os.write(2, f"trainyard: cannot start the task: {exc!r}\n".encode())
        finally:
            os._exit(_EXEC_FAILED)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m trainyard.backends.local.supervisor TASK_DIR", file=sys.stderr)
        return 2
    return Supervisor(os.path.abspath(argv[1])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
