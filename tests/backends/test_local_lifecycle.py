"""Stopping local tasks, surviving server and supervisor deaths, and leaving no zombies behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

from deadlines import scaled

from trainyard.backends.local import procfs, supervisor, taskfiles
from trainyard.backends.local.backend import (
    STARTUP_TIMEOUT_SECONDS,
    SUPERVISOR_LOST,
    LocalBackend,
)


def _gone(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is None or stat[0] in "ZX"


def _pids(local, key) -> dict:
    return taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.PID))


def _zombie_children() -> set[int]:
    zombies = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except FileNotFoundError:
                continue
            if fields[0] == b"Z" and int(fields[1]) == os.getpid():
                zombies.add(int(name))
    return zombies


def test_a_task_trapping_sigterm_gets_it_and_exits_cleanly(local):
    key = local.launch("trap 'echo got TERM; exit 0' TERM\necho ready\nsleep 300 & wait")
    local.wait_log(key, "ready")
    local.backend.stop(key, 5)
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal) == (0, None)
    assert "Trainyard asked it to stop" in status.message
    assert local.log(key) == "ready\ngot TERM\n"
    assert taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.EXIT))["stopped"] is True


def test_a_task_ignoring_sigterm_is_killed_after_the_grace(local):
    key = local.launch("trap '' TERM\necho ready\nsleep 300")
    local.wait_log(key, "ready")
    started = time.monotonic()
    local.backend.stop(key, 0.5)
    status = local.wait_ended(key)
    assert time.monotonic() - started >= 0.5
    assert (status.exit_code, status.signal) == (137, 9)
    assert "SIGKILL" in status.message


def test_stop_kills_the_whole_process_group(local):
    key = local.launch("sleep 300 &\necho $! > child.pid\necho ready\nwait")
    local.wait_log(key, "ready")
    child = int((local.backend.task_dir(key) / taskfiles.WORK_DIR / "child.pid").read_text())
    assert not _gone(child)
    local.backend.stop(key, 5)
    assert local.wait_ended(key).signal == signal.SIGTERM
    assert _gone(child)


def test_leftovers_of_a_finished_task_are_killed_before_its_exit_is_recorded(local):
    key = local.launch("(trap '' TERM; sleep 300) &\necho $! > child.pid\nexit 4")
    assert local.wait_ended(key).exit_code == 4
    child = int((local.backend.task_dir(key) / taskfiles.WORK_DIR / "child.pid").read_text())
    assert _gone(child)


def test_stop_is_idempotent_and_harmless_on_ended_or_unknown_tasks(local):
    key = local.launch("sleep 300")
    local.wait_until(lambda: (_pids(local, key) or {}).get("task"))
    local.backend.stop(key, 5)
    local.backend.stop(key, 5)
    assert (local.wait_ended(key).exit_code, local.status(key).signal) == (143, 15)
    local.backend.stop(key, 5)
    local.backend.stop(local.new_key(), 5)


def test_a_stop_right_after_launch_wins_whether_or_not_the_task_started(local, tmp_path):
    ran = tmp_path / "ran"
    key = local.launch(f"sleep 300\ntouch {ran}")
    local.backend.stop(key, 5)
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal) == (143, 15)
    assert not ran.exists()


def test_a_restarted_server_re_adopts_a_running_task_and_sees_its_real_exit(local, tmp_path):
    go = tmp_path / "go"
    key = local.launch(f"echo ready\nwhile [ ! -e {go} ]; do sleep 0.02; done\nexit 7")
    local.wait_log(key, "ready")
    del local.backend  # the server dies; its supervisors live on
    gc.collect()
    restarted = LocalBackend(local.state_dir)
    assert restarted.observe([key])[key].running
    go.touch()
    status = local.wait_ended(key, backend=restarted)
    assert (status.exit_code, status.signal) == (7, None)


def test_a_task_outlives_its_killed_supervisor_and_can_still_be_stopped(local):
    key = local.launch("trap '' TERM\necho ready\nsleep 300")
    local.wait_log(key, "ready")
    record = _pids(local, key)
    os.kill(record["supervisor"]["pid"], signal.SIGKILL)
    local.wait_until(lambda: _gone(record["supervisor"]["pid"]))
    status = local.status(key)
    assert status.running and "supervisor is gone" in status.message
    local.backend.stop(key, 0.5)
    local.backend.stop(key, 0.5)
    status = local.wait_ended(key)
    # The task's waiter outlived the supervisor and recorded the SIGKILL that ended it.
    assert (status.exit_code, status.signal) == (137, 9) and SUPERVISOR_LOST in status.message
    assert not procfs.group_members(record["task"]["pgid"])


def test_the_backend_leaves_no_zombie_supervisors(local):
    keys = [local.launch(f"exit {i}") for i in range(5)]
    for key in keys:
        local.wait_ended(key)
    supervisors = [_pids(local, key)["supervisor"] for key in keys]

    def reaped() -> bool:
        local.backend.observe(keys)  # each observe reaps the supervisors that have exited
        return not any(procfs.start_time(s["pid"]) == s["start_time"] for s in supervisors)

    # A zombie keeps its /proc entry: only a supervisor exited *and reaped* satisfies this.
    local.wait_until(reaped)
    assert not {s["pid"] for s in supervisors} & _zombie_children()


def test_a_launch_whose_supervisor_never_came_is_abandoned_and_a_late_one_does_nothing(local, tmp_path):
    ran = tmp_path / "ran"
    key = local.new_key()
    task_dir = local.backend.task_dir(key)
    # What a server killed between writing spec.json and spawning the supervisor leaves.
    task_dir.mkdir(parents=True)
    spec = {"script": f"touch {ran}", "env": {}, "cwd": str(task_dir), "shell": "/bin/bash", "grace_seconds": 1}
    taskfiles.write_json(str(task_dir / taskfiles.SPEC), spec)
    long_ago = time.time() - STARTUP_TIMEOUT_SECONDS - 1
    os.utime(task_dir / taskfiles.SPEC, (long_ago, long_ago))

    status = LocalBackend(local.state_dir).observe([key])[key]
    assert not status.running and status.exit_code is None and "no supervisor started" in status.message
    late_supervisor = [sys.executable, "-m", supervisor.__name__, str(task_dir)]
    late = subprocess.run(late_supervisor, check=False, capture_output=True, text=True)
    assert late.returncode == 0 and "already claimed" in late.stderr
    assert not ran.exists()
    assert local.status(key).message == status.message


def test_a_stop_outlives_the_server_that_sent_it_when_the_supervisor_is_gone(local):
    key = local.launch("trap '' TERM\necho ready\nsleep 300")
    local.wait_log(key, "ready")
    record = _pids(local, key)
    os.kill(record["supervisor"]["pid"], signal.SIGKILL)
    local.wait_until(lambda: _gone(record["supervisor"]["pid"]))
    # The stop comes from a server that dies right after sending it: its in-memory
    # SIGKILL timer dies with it, as it would in a crash or a restart.
    stopper = (
        "import os\n"
        "from trainyard.backends.base import TaskKey\n"
        "from trainyard.backends.local.backend import LocalBackend\n"
        f"LocalBackend({str(local.state_dir)!r}, gpus=[]).stop(TaskKey.parse({str(key)!r}), 0.3)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", stopper], check=True, timeout=scaled(60))
    stop = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.STOP))
    assert stop["grace_seconds"] == 0.3 and stop["deadline"] > time.time() - 60
    pgid, started = record["task"]["pgid"], record["task"]["start_time"]
    assert procfs.group_alive(pgid, started)  # it ignored the SIGTERM

    restarted = LocalBackend(local.state_dir, gpus=[])
    status = local.wait_ended(key, backend=restarted)
    assert time.time() >= stop["deadline"]
    assert (status.exit_code, status.signal) == (137, 9) and SUPERVISOR_LOST in status.message
    assert not procfs.group_members(pgid)


def test_a_stop_recorded_but_never_signalled_is_delivered_by_a_later_observe(local):
    key = local.launch("trap 'echo got TERM; exit 0' TERM\necho ready\nsleep 300 & wait")
    local.wait_log(key, "ready")
    # What a server killed between writing stop.json and signalling the supervisor leaves.
    overdue = {"grace_seconds": 5, "requested_at": "2026-01-01T00:00:00+00:00", "deadline": time.time() - 1}
    taskfiles.write_json(str(local.backend.task_dir(key) / taskfiles.STOP), overdue)
    status = local.wait_ended(key, backend=LocalBackend(local.state_dir, gpus=[]))
    assert (status.exit_code, status.signal) == (0, None)
    assert "Trainyard asked it to stop" in status.message and local.log(key) == "ready\ngot TERM\n"


def test_a_stop_repeated_after_its_deadline_kills_the_task_at_once(local):
    # A task that ignores SIGTERM, stopped with a long grace; the stop is then repeated as
    # if its deadline had passed (what observe does for a task still running then: the
    # safety net, should a stop go astray on its way to the waiter): the waiter kills the
    # group now, not when its own 60 s timer would.
    key = local.launch("trap '' TERM\necho ready\nsleep 300")
    local.wait_log(key, "ready")
    local.backend.stop(key, 60)
    stop_path = str(local.backend.task_dir(key) / taskfiles.STOP)
    taskfiles.write_json(stop_path, {**taskfiles.read_json(stop_path), "deadline": time.time() - 1})
    local.backend.stop(key, 0)
    status = local.wait_ended(key, timeout=20)  # the first stop's own timer: 60 s
    assert (status.exit_code, status.signal) == (137, 9)


def test_a_second_stop_never_postpones_the_first_deadline(local):
    key = local.launch("sleep 300")
    local.wait_until(lambda: (_pids(local, key) or {}).get("task"))
    stop_path = str(local.backend.task_dir(key) / taskfiles.STOP)
    local.backend.stop(key, 60)
    first = taskfiles.read_json(stop_path)["deadline"]
    local.backend.stop(key, 600)
    assert taskfiles.read_json(stop_path)["deadline"] == first
    assert local.wait_ended(key).signal == signal.SIGTERM


def test_a_tasks_end_is_announced_once_it_is_recorded(local):
    # TaskEndNotices: the controller's next cycle comes when a supervisor exits, not at its
    # tick; by then observe must already report the end (the supervisor wrote it first).
    import threading

    ended = threading.Event()
    local.backend.on_task_end(ended.set)
    key = local.launch("echo done\nexit 3")
    assert ended.wait(scaled(30))
    status = local.backend.observe([key])[key]
    assert (status.running, status.exit_code) == (False, 3)
    # With nothing left to watch, the watching thread ends (one per backend would outlive it).
    local.wait_until(lambda: local.backend._exits._epoll is None)  # its thread returns with it
