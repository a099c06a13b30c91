"""The per-task supervisor: runs one task detached, forwards stops, records its exit status.

Run as ``python -I -S SNAPSHOT TASK_DIR`` from a private copy of this module and its
stdlib-only neighbours (``launcher`` says why), never from the installed package; it
imports only the stdlib because it sits on the submit→RUNNING path.

Three processes per task::

    supervisor   own session       claims the task, records the pids, writes exit.json
      └ waiter   supervisor's group  the task's parent: signals its group, writes status.json
          └ task own process group   bash running the script (as the spec's user, if any)

Why the waiter: only a process's parent learns how it ended, and the supervisor can be lost
while the task runs (SIGKILLed, OOM-killed); the issue was tasks that finished their work
and were then recorded FAILED and run again. The waiter is a fork of the supervisor that
never execs and runs no code of the task's: it stays root when the supervisor is, so a task
run as another user cannot signal it, and it is outside the task's process group, so no
signal meant for the task (a stop, its SIGKILL) reaches it. If the supervisor dies, the
waiter is reparented and still records the task's status in ``status.json``, which the
backend then reports. Only when neither file exists is the status truly unknown: the
controller marks the task LOST (``core/lifecycle``).

Sequence, chosen so that a crash at any moment leaves a state the backend can read
(see ``taskfiles`` for the files):

1. Install signal handlers, read ``spec.json``.
2. Claim the task by creating ``pid.json`` exclusively (a second supervisor for the same
   task gives up here). A claim with ``"task": null`` whose supervisor is dead means the
   task never ran.
3. With the stop signals blocked: create the task's cgroup with its CPU and memory limits
   (``cgroups``; the spec's ``cgroup`` plan, when the node enforces limits); fork the
   waiter; it forks the task process into the task's own process group, moves it into the
   cgroup, and reports the task's pid over a pipe; record both in ``pid.json``. The task
   waits on a gate (a pipe from the waiter, which waits on a pipe from the supervisor)
   and only execs after the record exists; if the supervisor dies first, the waiter sees
   EOF and closes the task's gate, and the task exits unrun, so no task ever runs
   unrecorded, nor a line of it outside its limits.
4. Open the gate: the task execs the command line of ``task_argv`` (the spec's ``argv``:
   a bubblewrap sandbox around ``bash --noprofile --norc script.sh``, or bash alone) with
   stdin from /dev/null and stdout+stderr appended to ``output.log`` — through a pipe when
   the spec caps the log (``log_max_bytes``): the waiter's other child, the *log writer*
   (root, outside the task's group and cgroup), copies the pipe into the log up to the cap,
   then writes one line saying so and drops the rest, reading on so that the task runs on
   (with ``log_cap_stop``, it has the waiter SIGKILL the task's group instead). The task
   never holds the log's file descriptor, so no write of its can pass the cap. It runs with
   the environment of the spec's ``launch_env`` when it has one (a sandbox's: what runs
   before the task, as root, never sees the job's variables, and the sandbox's last step
   gives the task its ``env``), else its ``env``; a task with a
   ``container`` execs the container engine's client instead (``containerrun``: the image
   is pulled first when the node lacks it), which stays root and drops to the task's user
   inside the container, and whose container the waiter removes if the client was killed. When the spec names
   a ``user`` the task first drops to it (groups, gid, uid; after joining its process
   group and redirecting its output, before exec) and runs the copy of the script at
   ``script_file``, since it cannot read the task directory.
5. On SIGTERM/SIGINT (a stop), the supervisor forwards SIGTERM to the waiter, which
   SIGTERMs the task's group and arms a timer; when it fires while the task still runs,
   the waiter SIGKILLs the group. Both wait for their child with ``wait_exited``, which
   wakes for every handled signal whenever it landed (a blocking ``waitid`` slept through
   one that came just before it: the stops CI lost, issue 28). A stop repeated once its
   deadline has passed (the backend repeats it while the task still runs) is forwarded
   again, and the waiter then SIGKILLs the group at once: a safety net, should a stop
   still go astray. Only the waiter signals the group: as the task's parent
   it alone knows that the group id is still the task's (step 6). (Without a supervisor,
   the backend signals the group itself, checking the leader's start time.)
6. When the task's main process exits, the waiter waits for it *without reaping* (its
   zombie keeps the group id from being reused), SIGKILLs whatever is left of its group,
   waits until those are gone, then SIGKILLs what is left in the task's cgroup, reads how
   many of its processes the kernel killed at the memory limit (``reason``:
   ``OUT_OF_MEMORY`` when the task failed after one) and removes the cgroup, waits (a
   while) for the log writer to drain the pipe and reaps it (its exit status says whether
   the cap was reached: the status message then says so), writes ``status.json`` durably,
   then reaps the task and exits with the task's status.
7. The supervisor reaps the waiter and writes ``exit.json`` durably from ``status.json``.
   A waiter that ended without writing it (killed) leaves the task's status unknown: the
   supervisor SIGKILLs the task's group if it still runs, and records ``"exit_code": null``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

from trainyard.backends import cgroups
from trainyard.backends.local import containerrun, procfs, taskfiles

# Stdlib-only there, so that the Slurm backend's task start on the nodes opens them the same way.
from trainyard.backends.sandboxjoin import SANDBOX_NOT_FOUND_HINT, open_mount_fds

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_LOG_CAP_SIGNAL = signal.SIGUSR1  # the log writer to the waiter: the cap is reached, stop the task
_HANDLED = {*_STOP_SIGNALS, signal.SIGALRM, signal.SIGHUP, _LOG_CAP_SIGNAL}
_LOG_CAPPED = 3  # the log writer's exit status when it dropped output at the cap
_LEFTOVER_WAIT_SECONDS = 5.0
_EXEC_FAILED = 127  # what a shell reports for a command it could not run
_WAITER_FAILED = 125  # the waiter's own exit status when it failed (see supervisor.log)


def _iso(t: float) -> str:
    """``t`` (seconds since the epoch) as an ISO 8601 UTC timestamp."""
    micro = int((t % 1) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{micro:06d}+00:00"


def task_argv(spec: dict[str, Any], script_path: str) -> list[str]:
    """The command line the task process execs: the one place that says what runs.

    The backend writes the whole command into the spec (a sandbox's included); specs
    written before it did lack it, and run bash on the script directly.
    """
    return spec.get("argv") or [spec["shell"], "--noprofile", "--norc", script_path]


class Supervisor:
    """Supervises the task of one task directory, from claim to exit record."""

    def __init__(self, task_dir: str) -> None:
        self.task_dir = task_dir
        self.grace_seconds = 30.0
        self.waiter_pid: int | None = None
        self.waiter_reaped = False
        self.task: tuple[int, int] | None = None  # (pgid, leader start time)
        self.stop_requested = False
        self.started_at = time.time()
        self.cgroup: dict[str, Any] | None = None  # the task's cgroup plan, once created
        self.wake_fd = -1  # read end of the pipe each handled signal writes to (``_wake_on_signals``)

    def path(self, name: str) -> str:
        return os.path.join(self.task_dir, name)

    def run(self) -> int:
        self.wake_fd = _wake_on_signals()
        for stop_signal in _STOP_SIGNALS:
            signal.signal(stop_signal, self._on_stop)
        # No terminal: a stray SIGHUP must not kill the supervisor (or the waiter).
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
        exit_code, sig, message, finished_at, limits = self._wait_waiter()
        self._write_exit(exit_code, sig, message, finished_at, limits)
        return 0

    def _start_task(self, spec: dict[str, Any], record: dict[str, object]) -> bool:
        """Fork the waiter (which forks the task), record both, open the gate; False when
        a stop came before the task started."""
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
        report_r, report_w = os.pipe()
        fds = [log_fd, null_fd, gate_r, gate_w, report_r, report_w]
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            # backend.stop writes stop.json before it reads pid.json; we wrote pid.json
            # before reading stop.json: at least one of us sees the other.
            if self.stop_requested or os.path.exists(self.path(taskfiles.STOP)):
                self.stop_requested = True
                return False
            plan, notes = _task_cgroup(spec)
            self.cgroup = plan
            pid = os.fork()
            if pid == 0:
                os.close(gate_w)
                os.close(report_r)
                os.close(self.wake_fd)  # the waiter makes its own
                waiter = Waiter(self.task_dir, self.grace_seconds, plan, notes)
                waiter.run(spec, spec.get("script_file") or script_path, gate_r, report_w, log_fd, null_fd)
            self.waiter_pid = pid
            os.close(report_w)
            fds.remove(report_w)
            task_pid = _read_pid(report_r)
            if task_pid is None:
                return True  # the waiter failed before forking the task: _wait_waiter says so
            self.task = (task_pid, procfs.start_time(task_pid) or 0)
            record["waiter"] = {"pid": pid, "start_time": procfs.start_time(pid)}
            record["task"] = {"pid": task_pid, "pgid": task_pid, "start_time": self.task[1]}
            taskfiles.write_json(self.path(taskfiles.PID), record)
            self.started_at = time.time()
            try:
                os.write(gate_w, b"go")
            except BrokenPipeError:
                pass  # the waiter already died; _wait_waiter reports how
            return True
        finally:
            for fd in fds:
                os.close(fd)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)

    def _wait_waiter(self) -> tuple[int | None, int | None, str, str | None, dict[str, Any]]:
        """Wait for the waiter; ``(exit_code, signal, message, finished_at, limits)`` of the
        task (``limits``: ``reason`` and ``oom_kills``, when its cgroup had any to say)."""
        assert self.waiter_pid is not None
        # Unreaped, then block the stop signals, then reap: a stop forwarded now can never
        # reach a process that took over the waiter's pid.
        info = wait_exited(self.waiter_pid, self.wake_fd)
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        os.waitpid(self.waiter_pid, 0)
        self.waiter_reaped = True

        notes = ["Trainyard asked it to stop"] if self.stop_requested else []
        status = taskfiles.read_json(self.path(taskfiles.STATUS))
        if status is None:
            exited = info.si_code == os.CLD_EXITED
            how = f"exited with {info.si_status}" if exited else f"killed by signal {info.si_status}"
            notes.append(f"the task's waiter process {how} without recording the task's exit status")
            if self.task is not None and _kill_group(*self.task):
                notes.append("its process group was killed")
            if self.cgroup is not None:
                cgroups.kill_all(self.cgroup)
                cgroups.remove(self.cgroup)
            return None, None, "; ".join(notes), None, {}
        if status.get("message"):
            notes.append(status["message"])
        finished_at = status.get("finished_at")
        limits = {name: status[name] for name in ("reason", "oom_kills") if status.get(name)}
        return (status.get("exit_code"), status.get("signal"), "; ".join(notes),
                finished_at if isinstance(finished_at, str) else None, limits)

    def _on_stop(self, signum: int, frame: object) -> None:
        # A repeat is forwarded too: the backend repeats a stop whose deadline passed while
        # the task still runs, and the waiter then kills the task's group at once (a safety net).
        self.stop_requested = True
        if self.waiter_pid is None or self.waiter_reaped:
            return  # not started yet: _start_task sees the flag
        try:
            os.kill(self.waiter_pid, signal.SIGTERM)  # the waiter applies the grace (step 5)
        except ProcessLookupError:
            pass

    def _write_exit(self, exit_code: int | None, sig: int | None, message: str, finished_at: str | None = None,
                    limits: dict[str, Any] | None = None) -> None:
        record: dict[str, Any] = {
            **(limits or {}),
            "exit_code": exit_code,
            "signal": sig,
            "started_at": _iso(self.started_at),
            "finished_at": finished_at or _iso(time.time()),
            "stopped": self.stop_requested,
            "message": message,
        }
        taskfiles.write_json(self.path(taskfiles.EXIT), record, durable=True)


class Waiter:
    """The task's parent, forked from the supervisor: the one process that signals the
    task's group, and the one that learns how the task ended (steps 3, 5 and 6)."""

    def __init__(self, task_dir: str, grace_seconds: float, cgroup: dict[str, Any] | None = None,
                 notes: list[str] | None = None) -> None:
        self.task_dir = task_dir
        self.grace_seconds = grace_seconds
        self.cgroup = cgroup  # the task's cgroup plan (``cgroups``), created; None: no limits
        self.notes = list(notes or [])  # for the task's status message (limits not enforced)
        self.task_pid: int | None = None  # also the task's process-group id
        self.reaped = False
        self.stop_requested = False
        self.log_writer: int | None = None  # the log writer's pid, while it runs
        self.log_cap_stopped = False

    def run(self, spec: dict[str, Any], script_path: str, gate_r: int, report_w: int, log_fd: int,
            null_fd: int) -> NoReturn:
        """Run the task to its end, record its status; never returns into the supervisor."""
        try:
            code = self._run(spec, script_path, gate_r, report_w, log_fd, null_fd)
        except BaseException as exc:  # noqa: BLE001 - a fork of the supervisor must never return to it
            try:
                os.write(2, f"trainyard waiter: {exc!r}\n".encode())
            finally:
                os._exit(_WAITER_FAILED)
        os._exit(code)

    def _run(self, spec: dict[str, Any], script_path: str, gate_r: int, report_w: int, log_fd: int,
             null_fd: int) -> int:
        # Stop signals are still blocked (inherited): handlers first, then the task.
        wake_fd = _wake_on_signals()
        for stop_signal in _STOP_SIGNALS:
            signal.signal(stop_signal, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_grace_expired)
        signal.signal(_LOG_CAP_SIGNAL, self._on_log_cap)
        # A task with a share of a GPU: its owner's MPS daemon runs before it starts (``mps``).
        mps_plan = spec.get("mps")
        if mps_plan:
            # Imported here: subprocess would add to every task's start, and only a share needs it.
            from trainyard.backends import mps

            self.notes += mps.acquire(mps_plan, os.getpid())
        task_gate_r, task_gate_w = os.pipe()
        output_fd = log_fd
        limit = spec.get("log_max_bytes")
        if isinstance(limit, int) and limit > 0:
            output_r, output_fd = os.pipe()
            self.log_writer = os.fork()
            if self.log_writer == 0:
                for fd in (task_gate_r, task_gate_w, gate_r, report_w, null_fd, output_fd):
                    os.close(fd)
                _run_log_writer(output_r, log_fd, limit, bool(spec.get("log_cap_stop")))
            os.close(output_r)
        pid = os.fork()
        if pid == 0:
            for fd in (task_gate_w, gate_r, report_w):
                os.close(fd)
            _exec_task(spec, script_path, task_gate_r, output_fd, null_fd, self.task_dir)
        for fd in {task_gate_r, log_fd, null_fd, output_fd}:
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # the task does it too; whoever is first wins the race
        except (PermissionError, ProcessLookupError):
            pass
        if self.cgroup is not None:
            # Before the gate opens: the task never runs a line outside its limits.
            try:
                cgroups.join(self.cgroup, pid)
            except OSError as exc:
                self.notes.append(f"{LIMITS_OFF}: it could not join its cgroup ({exc})")
                cgroups.remove(self.cgroup)
                self.cgroup = None
        self.task_pid = pid
        os.write(report_w, f"{pid}\n".encode())
        os.close(report_w)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
        released = os.read(gate_r, 2) == b"go"  # EOF: the supervisor died before recording us
        os.close(gate_r)
        if released:
            try:
                os.write(task_gate_w, b"go")
            except BrokenPipeError:
                pass  # the task was killed at the gate (a stop): its status says so
        os.close(task_gate_w)  # unreleased, the task reads EOF and exits unrun

        # Unreaped, the task is a zombie: its pid, hence the group id, cannot be reused
        # while we kill the rest of the group.
        info = wait_exited(pid, wake_fd)
        finished_at = _iso(time.time())
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + _LEFTOVER_WAIT_SECONDS
        leftovers = procfs.group_members(pid)
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.01)
            leftovers = procfs.group_members(pid)
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)  # no killpg once the id is free
        if mps_plan:  # after the user's last shared task on the node, its daemon quits
            from trainyard.backends import mps

            self.notes += mps.release(mps_plan)
        if info.si_code == os.CLD_EXITED:
            exit_code, sig = info.si_status, None
        else:  # killed (or dumped core)
            exit_code, sig = 128 + info.si_status, info.si_status
            if spec.get("container") is not None:  # its container outlives a killed client
                containerrun.remove_container(spec["container"])
        if released:
            notes = list(self.notes)
            if leftovers:
                notes.append(f"{len(leftovers)} process(es) of the task's group did not exit after SIGKILL")
            status = {"exit_code": exit_code, "signal": sig, "finished_at": finished_at,
                      "stopped": self.stop_requested}
            if self.cgroup is not None:
                status.update(_end_cgroup(self.cgroup, exit_code, notes))
            if exit_code == _EXEC_FAILED and spec.get("datasets"):
                status.update(_dataset_failure(self.task_dir, notes))
            if exit_code in (126, 127) and "launch_env" in spec and "reason" not in status:
                notes.append(SANDBOX_NOT_FOUND_HINT)
            if self._end_log_writer():
                notes.append(log_cap_message(spec["log_max_bytes"], stopped=self.log_cap_stopped))
                status["log_capped"] = True
            status["message"] = "; ".join(notes)
            # Before the reap: while the waiter lives, the backend waits for this file.
            taskfiles.write_json(os.path.join(self.task_dir, taskfiles.STATUS), status, durable=True)
        self._end_log_writer()
        os.waitpid(pid, 0)
        self.reaped = True
        return exit_code

    def _end_log_writer(self) -> bool:
        """Once the task is gone: let the log writer copy what is left in the pipe (it ends
        at EOF), kill it if a process outside the task's group and cgroup still holds the
        pipe, reap it; whether it reached the cap."""
        if self.log_writer is None:
            return False
        writer, self.log_writer = self.log_writer, None
        deadline = time.monotonic() + _LEFTOVER_WAIT_SECONDS
        while True:
            done, status = os.waitpid(writer, os.WNOHANG)
            if done:
                return os.WIFEXITED(status) and os.WEXITSTATUS(status) == _LOG_CAPPED
            if time.monotonic() >= deadline:
                os.kill(writer, signal.SIGKILL)
                os.waitpid(writer, 0)
                return False  # its cap is in the log, if it was reached
            time.sleep(0.01)

    def _on_log_cap(self, signum: int, frame: object) -> None:
        """The log writer reached the cap and the admin asked for such tasks to stop."""
        self.log_cap_stopped = True
        self._signal_group(signal.SIGKILL)

    def _on_stop(self, signum: int, frame: object) -> None:
        stop = taskfiles.read_json(os.path.join(self.task_dir, taskfiles.STOP)) or {}
        if self.stop_requested:
            # A repeat: once the stop's deadline has passed, the task's group is killed now
            # (whatever became of the grace timer; a safety net); before it, the timer stands.
            deadline = stop.get("deadline")
            if isinstance(deadline, (int, float)) and time.time() >= deadline:
                self._signal_group(signal.SIGKILL)
            return
        self.stop_requested = True
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


LIMITS_OFF = "its CPU and memory limits are not enforced"


def _dataset_failure(task_dir: str, notes: list[str]) -> dict[str, Any]:
    """A task whose datasets could not be made ready (``_fetch_datasets``): its reason, and
    why first among the notes (not a command that was not found); no exit status when the
    failure may pass, so that the task is retried as a platform fault (LOST)."""
    from trainyard.backends import datacache

    failed = datacache.failure(task_dir)
    if failed is None:
        return {}
    why, transient = failed
    notes.insert(0, why)
    return {"reason": datacache.DATASET_UNAVAILABLE, **({"exit_code": None} if transient else {})}


def _size_text(size: int) -> str:
    return f"{size >> 20} MB" if size % (1 << 20) == 0 else f"{size:,} bytes"


def log_cap_line(limit: int) -> bytes:
    """The line the log ends with once its cap is reached."""
    return f"trainyard: log cap of {_size_text(limit)} reached; further output dropped\n".encode()


def log_cap_message(limit: int, *, stopped: bool) -> str:
    """What the task's status message says of a log that reached its cap."""
    if stopped:
        return f"its log reached the cap of {_size_text(limit)} and it was stopped (the admin's task_log_cap_stop)"
    return f"its log reached the cap of {_size_text(limit)}; further output was dropped"


def _run_log_writer(source: int, log_fd: int, limit: int, stop: bool) -> NoReturn:
    """The log writer (a child of the waiter): copy the task's output from ``source`` into
    the log until ``limit`` bytes, then the cap's line; read on and drop the rest until
    EOF (every writer gone). Exits ``_LOG_CAPPED`` when it dropped output."""
    code = 0
    try:
        # A stop of the supervisor is not the writer's to act on: it drains until EOF, or
        # until the waiter kills it.
        for sig in (*_STOP_SIGNALS, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(_LOG_CAP_SIGNAL, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        waiter = os.getppid()

        def stop_task() -> None:
            if os.getppid() == waiter:  # never a process that adopted us (init) once the waiter died
                os.kill(waiter, _LOG_CAP_SIGNAL)

        code = copy_capped(source, log_fd, limit, on_cap=stop_task if stop else None)
    except BaseException as exc:  # noqa: BLE001 - a fork of the waiter must never return to it
        try:
            os.write(2, f"trainyard log writer: {exc!r}\n".encode())
        finally:
            os._exit(_WAITER_FAILED)
    os._exit(code)


def copy_capped(source: int, log_fd: int, limit: int, on_cap: Any = None) -> int:
    """Copy ``source`` into ``log_fd`` (opened for appending) until the file holds ``limit``
    bytes, then write the cap's line, call ``on_cap`` and drop the rest; returns
    ``_LOG_CAPPED`` when something was dropped, else 0."""
    written = os.fstat(log_fd).st_size
    capped = False
    last = b"\n"
    while chunk := os.read(source, 1 << 16):
        if capped:
            continue
        room = max(0, limit - written)
        kept = chunk[:room]
        _write_all(log_fd, kept)
        written += len(kept)
        if kept:
            last = kept[-1:]
        if len(chunk) > room:
            _write_all(log_fd, (b"" if last == b"\n" else b"\n") + log_cap_line(limit))
            capped = True
            if on_cap is not None:
                on_cap()
    return _LOG_CAPPED if capped else 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _task_cgroup(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """Create the task's cgroup from its spec's plan, before anything of the task is forked:
    ``(plan, notes)``, the plan None when the task runs without one (and the notes say why)."""
    notes = [spec["limits_note"]] if spec.get("limits_note") else []
    plan = spec.get("cgroup")
    if plan is None:
        return None, notes
    try:
        cgroups.create(plan)
    except OSError as exc:
        cgroups.remove(plan)
        return None, [*notes, f"{LIMITS_OFF}: its cgroup could not be made ({exc})"]
    return plan, notes


def _end_cgroup(plan: dict[str, Any], exit_code: int, notes: list[str]) -> dict[str, Any]:
    """After the task's group is gone: kill what is left in its cgroup (a process that left
    the group), read its OOM kills, remove it. What ``status.json`` records of it."""
    if left := cgroups.kill_all(plan):
        notes.append(f"{len(left)} process(es) of the task's cgroup did not exit after SIGKILL")
    kills = cgroups.oom_kills(plan)
    cgroups.remove(plan)
    record: dict[str, Any] = {"oom_kills": kills} if kills else {}
    # A task that ended well despite a kill (it retried a step) did not fail for memory.
    if kills and exit_code != 0:
        record["reason"] = cgroups.OUT_OF_MEMORY
    return record


def _wake_on_signals() -> int:
    """Have every signal this process handles write a byte to a new pipe (``set_wakeup_fd``),
    and return its read end, for ``wait_exited``. In a fork (the waiter), the pipe inherited
    from its parent is closed: the parent is not woken by the child's signals."""
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    inherited = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    if inherited != -1:
        os.close(inherited)
    return read_fd


def wait_exited(pid: int, wake_fd: int) -> os.waitid_result:
    """Wait until the child ``pid`` has ended, leaving it unreaped (WNOWAIT), and run this
    process's signal handlers as their signals come (``wake_fd``: from ``_wake_on_signals``).

    Not a blocking ``os.waitid``, which lost stops (issue 28): CPython runs a signal's
    handler between bytecodes, and a process asleep in a system call learns of a signal
    only when it interrupts the call. A signal that lands after the interpreter's last look
    and before the process sleeps interrupts nothing, and its handler waited for the child's
    end: a stop forwarded to the waiter as it went to wait for the task was acted on when
    the task ended on its own. Here each handled signal also leaves a byte in the wake
    pipe, which ``poll`` sees whenever it came: the handler runs as ``poll`` returns.
    """
    pidfd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)  # readable once the child has ended
        poller.register(wake_fd, select.POLLIN)
        while (info := os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)) is None:
            poller.poll()
            # Handlers tripped before this read run before the next poll; a signal that
            # lands after it leaves a byte, and the next poll returns at once.
            try:
                while os.read(wake_fd, 64):
                    pass
            except BlockingIOError:
                pass
        return info
    finally:
        os.close(pidfd)


def _read_pid(fd: int) -> int | None:
    """The pid the waiter reports on ``fd``; None when it died before reporting one."""
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    try:
        return int(data)
    except ValueError:
        return None


def _kill_group(pgid: int, leader_started: int) -> bool:
    """SIGKILL the task's group if it still runs, and wait (a while) until it is gone."""
    if not procfs.signal_group(pgid, leader_started, signal.SIGKILL):
        return False
    deadline = time.monotonic() + _LEFTOVER_WAIT_SECONDS
    while procfs.group_alive(pgid, leader_started) and time.monotonic() < deadline:
        time.sleep(0.01)
    return True


def _exec_task(spec: dict[str, Any], script_path: str, gate_r: int, log_fd: int, null_fd: int,
               task_dir: str = "") -> None:
    """In the task process (the waiter's child): wait for the gate, then exec the task."""
    try:
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
        if spec.get("datasets"):  # complete in the node's cache before anything runs, and marked in use
            _fetch_datasets(spec["datasets"], task_dir)
        if spec.get("container") is not None:  # the engine's client, as root (it drops the user)
            os.chdir(spec["cwd"])
            containerrun.exec_container(spec["container"])
        user = spec.get("user")
        if user is not None:
            os.setgroups(user["groups"])
            os.setgid(user["gid"])
            os.setuid(user["uid"])  # as root: real, effective and saved ids; capabilities go
            if os.getuid() != user["uid"] or os.geteuid() != user["uid"]:
                raise PermissionError(f"could not switch to user {user['name']!r}")
        os.chdir(spec["cwd"])
        argv = task_argv(spec, script_path)
        open_mount_fds(spec.get("mount_fds") or [])
        # A sandbox's command line runs as root before the task (``launch_env``, no job
        # variable: the loader would honour the job's LD_PRELOAD); its last step gives the
        # task its env. Bare bash is the task itself, already dropped to its account above.
        os.execve(argv[0], argv, spec["launch_env"] if "launch_env" in spec else spec["env"])
    except BaseException as exc:  # noqa: BLE001 - the child must never return to the waiter
        try:
            os.write(2, f"trainyard: cannot start the task: {exc!r}\n".encode())
        finally:
            os._exit(_EXEC_FAILED)


def _fetch_datasets(plan: dict[str, Any], task_dir: str) -> None:
    """Each of the task's datasets into the node's cache (``datacache``), or found there; its
    lines go to the task's log. An error ends the task unrun (exit 127), saying why in its
    log and in ``datacache.FAILED``, which the waiter makes its status's reason and message."""
    # Imported here: tarfile and urllib would add to every task's start, and only a task that
    # reads a dataset needs them.
    from trainyard.backends import datacache

    cache = datacache.NodeCache(plan["root"], int(plan["capacity"]), timeout=float(plan["timeout"]),
                                allowed_hosts=tuple(plan["allowed_hosts"]))
    try:
        for item in plan["items"]:
            cache.ensure(item, say=lambda line: _write_all(2, (line + "\n").encode()))
    except Exception as exc:  # noqa: BLE001 - a source's or the cache's fault: said, the task not run
        _write_all(2, f"trainyard: {datacache.record_failure(task_dir, exc)}\n".encode())
        os._exit(_EXEC_FAILED)


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:  # the backend's start-up check (``launcher``): it imported
        return 0
    if len(argv) != 2:
        print("usage: python -m trainyard.backends.local.supervisor TASK_DIR", file=sys.stderr)
        return 2
    return Supervisor(os.path.abspath(argv[1])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
