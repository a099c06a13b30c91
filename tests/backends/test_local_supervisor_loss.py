"""A task's exit status survives the loss of its supervisor; where nothing recorded it, it is unknown."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from trainyard.backends.local import procfs, taskfiles
from trainyard.backends.local.backend import SUPERVISOR_LOST, VANISHED, LocalBackend


def _gone(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is None or stat[0] in "ZX"


def _claim(local, key) -> dict:
    record = local.wait_until(lambda: (taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.PID)) or {}))
    assert isinstance(record, dict)
    return record


def _kill(local, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    local.wait_until(lambda: _gone(pid))


def _gated_task(local, tmp_path, exit_code: int):
    """Launch a task that runs until its release file exists, then exits ``exit_code``."""
    go = tmp_path / f"go-{exit_code}"
    key = local.launch(f"echo ready\nwhile [ ! -e {go} ]; do sleep 0.02; done\necho done\nexit {exit_code}")
    local.wait_log(key, "ready")
    return key, go


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_task_whose_supervisor_is_killed_still_gets_its_real_exit_code_recorded(local, tmp_path, exit_code):
    key, go = _gated_task(local, tmp_path, exit_code)
    record = _claim(local, key)
    _kill(local, record["supervisor"]["pid"])
    status = local.status(key)
    assert status.running and "waiter will record" in status.message

    go.touch()
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal) == (exit_code, None)
    assert SUPERVISOR_LOST in status.message and status.finished_at is not None
    assert local.log(key) == "ready\ndone\n"
    assert not (local.backend.task_dir(key) / taskfiles.EXIT).exists()  # no supervisor wrote it


def test_a_restarted_server_reads_the_status_recorded_after_the_supervisor_was_lost(local, tmp_path):
    key, go = _gated_task(local, tmp_path, 3)
    record = _claim(local, key)
    _kill(local, record["supervisor"]["pid"])
    del local.backend  # the server dies too
    gc.collect()
    go.touch()
    waiter = record["waiter"]["pid"]
    local.wait_until(lambda: _gone(waiter))  # the task ended, with no server and no supervisor
    status = LocalBackend(local.state_dir, gpus=[]).observe([key])[key]
    assert (status.running, status.exit_code) == (False, 3)


def test_a_stop_after_the_supervisor_was_lost_records_how_the_stop_ended_the_task(local):
    key = local.launch("trap 'echo got TERM; exit 0' TERM\necho ready\nsleep 300 & wait")
    local.wait_log(key, "ready")
    _kill(local, _claim(local, key)["supervisor"]["pid"])
    local.backend.stop(key, 5)  # no supervisor: the backend signals the task's group itself
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal) == (0, None) and SUPERVISOR_LOST in status.message
    assert local.log(key) == "ready\ngot TERM\n"


def test_the_waiter_is_outside_the_task_group_so_a_group_kill_cannot_lose_the_status(local):
    key = local.launch("echo ready\nsleep 300")
    local.wait_log(key, "ready")
    record = _claim(local, key)
    pgid, waiter = record["task"]["pgid"], record["waiter"]["pid"]
    assert os.getpgid(waiter) != pgid and procfs.read_stat(pgid)[1] == pgid  # the task leads its own group
    os.killpg(pgid, signal.SIGKILL)
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal) == (137, 9)  # recorded, by waiter and supervisor


def test_with_supervisor_and_waiter_gone_and_no_record_the_exit_status_is_unknown(local):
    key = local.launch("echo ready\nsleep 300")
    local.wait_log(key, "ready")
    record = _claim(local, key)
    _kill(local, record["supervisor"]["pid"])
    _kill(local, record["waiter"]["pid"])
    status = local.status(key)
    assert status.running and "will not be recorded" in status.message
    os.killpg(record["task"]["pgid"], signal.SIGKILL)
    local.wait_until(lambda: not procfs.group_members(record["task"]["pgid"]))
    status = local.wait_ended(key)
    assert (status.exit_code, status.signal, status.message) == (None, None, VANISHED)


def test_a_waiter_killed_under_a_live_supervisor_ends_the_task_and_records_no_exit_code(local):
    key = local.launch("echo ready\nsleep 300")
    local.wait_log(key, "ready")
    record = _claim(local, key)
    os.kill(record["waiter"]["pid"], signal.SIGKILL)
    status = local.wait_ended(key)
    assert status.exit_code is None and "waiter process killed by signal 9" in status.message
    assert "its process group was killed" in status.message
    assert not procfs.group_members(record["task"]["pgid"])  # nothing runs unwatched
