"""Atomic task files and pid identities that survive pid reuse."""

from __future__ import annotations

import os
import subprocess

from trainyard.backends.local import procfs, records, taskfiles


def test_exclusive_write_publishes_once_and_leaves_no_temporary_files(tmp_path):
    path = str(tmp_path / "pid.json")
    assert taskfiles.write_json(path, {"n": 1}, exclusive=True)
    assert not taskfiles.write_json(path, {"n": 2}, exclusive=True)
    taskfiles.write_json(path, {"n": 3}, durable=True)
    assert taskfiles.read_json(path) == {"n": 3}
    assert os.listdir(tmp_path) == ["pid.json"]


def test_missing_or_garbled_json_reads_as_none(tmp_path):
    (tmp_path / "torn.json").write_bytes(b'{"exit_co')
    (tmp_path / "list.json").write_text("[1]")
    for name in ("absent.json", "torn.json", "list.json"):
        assert taskfiles.read_json(str(tmp_path / name)) is None


def test_a_process_is_named_by_pid_and_start_time():
    me = os.getpid()
    started = procfs.start_time(me)
    assert procfs.is_alive(me, started)
    assert not procfs.is_alive(me, started + 1)  # same pid, another process
    assert not procfs.is_alive(me, started, boot="another-boot")
    assert not procfs.signal_process(me, started + 1, 0)


def test_a_process_group_is_alive_while_any_member_runs():
    leader = subprocess.Popen(["sleep", "300"], process_group=0)
    try:
        started = procfs.start_time(leader.pid)
        assert procfs.group_members(leader.pid) == [leader.pid]
        assert procfs.group_alive(leader.pid, started)
        assert not procfs.group_alive(leader.pid, started + 1)
        assert procfs.signal_group(leader.pid, started, 15)
        leader.wait()
        assert not procfs.group_alive(leader.pid, started)
    finally:
        leader.kill()
        leader.wait()


def test_a_stop_request_records_its_deadline_and_never_postpones_an_earlier_one():
    first = records.stop_request(None, 30.0, 1000.0)
    assert (first["grace_seconds"], first["deadline"]) == (30.0, 1030.0)
    assert records.stop_request(first, 60.0, 1010.0)["deadline"] == 1030.0
    sooner = records.stop_request(first, 5.0, 1010.0)
    assert (sooner["grace_seconds"], sooner["deadline"]) == (5.0, 1015.0)
    # Written before deadlines were recorded: requested_at + grace_seconds.
    old = {"grace_seconds": 2.5, "requested_at": "1970-01-01T00:16:40+00:00"}
    assert records.stop_deadline(old) == 1002.5
    assert records.stop_request(old, 60.0, 1001.0) == {**old, "deadline": 1002.5}
    for garbage in (None, {}, {"deadline": "soon"}, {"deadline": True}, {"deadline": float("inf")}):
        assert records.stop_deadline(garbage) is None
