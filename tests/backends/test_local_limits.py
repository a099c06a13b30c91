"""The local backend enforces a task's cpu and memoryMB with a real cgroup of this machine,
and reports a task the kernel killed at its memory limit as OUT_OF_MEMORY."""

from __future__ import annotations

import gc
import logging
import os
import signal
from pathlib import Path

import pytest

from trainyard.backends import cgroups
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.local import taskfiles
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.tasklimits import limits_layout

LAYOUT = cgroups.detect()
needs_cgroups = pytest.mark.skipif(isinstance(LAYOUT, str), reason=f"no usable cgroups here: {LAYOUT}")
MIB = 1024 * 1024
# Writes every page, so the memory is really used (a zeroed bytearray may not be).
HOG = "python3 -c \"b = b'x' * ({mb} << 20); print('allocated {mb} MiB')\""
# The task's own view: its memory cgroup's limit, read from inside the task.
OWN_MEMORY_LIMIT = (
    'dir=$(awk -F: \'$2 ~ /(^|,)memory(,|$)/ || $2 == "" {print $3; exit}\' /proc/self/cgroup)\n'
    'for f in memory.limit_in_bytes memory.max; do\n'
    '  for root in /sys/fs/cgroup/memory /sys/fs/cgroup; do\n'
    '    [ -r "$root$dir/$f" ] && { echo "limit $(cat "$root$dir/$f")"; break 2; }\n'
    '  done\n'
    'done\n'
)


def _launch(backend: LocalBackend, key: TaskKey, script: str, *, cpu_milli: int = 0, memory_mb: int = 0) -> None:
    backend.launch(TaskLaunch(key, backend.inventory()[0].name, script, {}, cpu_milli=cpu_milli, memory_mb=memory_mb))


def _plan(backend: LocalBackend, key: TaskKey) -> dict:
    spec = taskfiles.read_json(str(backend.task_dir(key) / taskfiles.SPEC))
    assert spec is not None
    return spec["cgroup"]


@needs_cgroups
def test_a_task_that_uses_more_memory_than_it_asked_ends_out_of_memory(local):
    key = local.new_key()
    _launch(local.backend, key, OWN_MEMORY_LIMIT + HOG.format(mb=300), memory_mb=64, cpu_milli=1000)
    status = local.wait_ended(key, timeout=30)
    assert status.reason == cgroups.OUT_OF_MEMORY and status.exit_code == 137
    # The limit was in place from the task's first line on; the hog never got its memory.
    assert local.log(key).startswith(f"limit {64 * MIB}\n") and "\nallocated 300 MiB" not in local.log(key)
    exit_record = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.EXIT))
    assert exit_record["reason"] == cgroups.OUT_OF_MEMORY and exit_record["oom_kills"] >= 1
    plan = _plan(local.backend, key)
    assert plan["memory_bytes"] == 64 * MIB and not any(os.path.exists(d) for d in plan["dirs"])  # removed


@needs_cgroups
def test_a_task_within_its_limits_is_untouched(local):
    key = local.new_key()
    _launch(local.backend, key, OWN_MEMORY_LIMIT + HOG.format(mb=20), memory_mb=128, cpu_milli=1000)
    status = local.wait_ended(key, timeout=30)
    assert (status.exit_code, status.reason, status.message) == (0, "", "")
    assert local.log(key) == f"limit {128 * MIB}\nallocated 20 MiB\n"
    assert not any(os.path.exists(d) for d in _plan(local.backend, key)["dirs"])


@needs_cgroups
def test_a_killed_process_the_task_outlives_is_no_failure_of_the_task(local):
    # The script goes on after its hog was killed and ends well: the task did not fail.
    key = local.new_key()
    _launch(local.backend, key, HOG.format(mb=300) + " || echo recovered", memory_mb=64)
    status = local.wait_ended(key, timeout=30)
    assert (status.exit_code, status.reason) == (0, "") and local.log(key).endswith("recovered\n")


@needs_cgroups
@pytest.mark.skipif(not isinstance(LAYOUT, str) and LAYOUT.cpu is None, reason="no cpu controller here")
def test_a_task_asking_half_a_cpu_gets_about_half_a_cpu_whatever_it_runs(local):
    # Two busy loops for 3 s: unlimited, they could use up to 2 CPUs. CPU time over wall
    # time, with a wide tolerance (the machine is shared; this is behaviour, not speed).
    script = (
        "start=$(date +%s%N)\n"
        "for i in 1 2; do timeout 3 bash -c 'while :; do :; done' & done\n"
        "wait\n"
        "end=$(date +%s%N)\n"
        "times\n"  # not in a pipeline: a subshell has no children of its own
        "echo wall $(( (end - start) / 1000000 ))\n"
    )
    key = local.new_key()
    _launch(local.backend, key, script, cpu_milli=500)
    plan = _plan(local.backend, key)
    assert plan["cpu_quota_us"] == 50_000
    assert local.wait_ended(key, timeout=30).exit_code == 0
    _, children, wall = local.log(key).splitlines()
    user, system = (_seconds(t) for t in children.split())
    ratio = (user + system) / (int(wall.split()[1]) / 1000)
    assert 0.05 < ratio < 0.7, local.log(key)


def _seconds(text: str) -> float:
    minutes, _, seconds = text.removesuffix("s").partition("m")
    return int(minutes) * 60 + float(seconds)


@needs_cgroups
def test_a_task_that_asks_for_no_limits_gets_no_cgroup(local):
    key = local.launch("echo free")
    assert local.wait_ended(key).exit_code == 0
    spec = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.SPEC))
    assert spec is not None and "cgroup" not in spec and "limits_note" not in spec


@needs_cgroups
def test_a_process_that_left_the_tasks_group_is_killed_with_its_cgroup(local, tmp_path):
    # setsid puts the sleeper in a session (and group) of its own: only the cgroup still holds it.
    pid_file = tmp_path / "escaped"
    key = local.new_key()
    _launch(local.backend, key, f"setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > {pid_file}", memory_mb=64)
    assert local.wait_ended(key, timeout=30).exit_code == 0
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    assert not any(os.path.exists(d) for d in _plan(local.backend, key)["dirs"])


@needs_cgroups
def test_a_restarted_server_reports_the_out_of_memory_end_its_lost_supervisor_missed(local, tmp_path):
    go = tmp_path / "go"
    key = local.new_key()
    _launch(local.backend, key, f"echo ready\nwhile [ ! -e {go} ]; do sleep 0.02; done\n" + HOG.format(mb=300),
            memory_mb=64)
    local.wait_log(key, "ready")
    claim = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.PID))
    assert claim is not None
    os.kill(claim["supervisor"]["pid"], signal.SIGKILL)  # the waiter alone records the end
    del local.backend  # and the server goes too
    gc.collect()
    go.touch()
    restarted = LocalBackend(local.state_dir, simulated_gpus=4)
    status = local.wait_ended(key, backend=restarted, timeout=30)
    assert (status.exit_code, status.reason) == (137, cgroups.OUT_OF_MEMORY)
    assert not any(os.path.exists(d) for d in _plan(restarted, key)["dirs"])


def test_two_backends_never_share_a_tasks_cgroup(tmp_path):
    if isinstance(LAYOUT, str):
        pytest.skip(LAYOUT)
    first, _ = limits_layout("auto", tmp_path / "a", lambda: LAYOUT)
    second, _ = limits_layout("auto", tmp_path / "b", lambda: LAYOUT)
    again, _ = limits_layout("auto", tmp_path / "a", lambda: LAYOUT)
    assert first is not None and second is not None and again is not None
    assert first.memory != second.memory and first.memory == again.memory  # found again after a restart


def test_without_cgroups_tasks_run_unlimited_and_say_so(tmp_path, caplog):
    why = "no cgroup memory controller is mounted (neither v1 nor v2 with the memory controller)"
    with caplog.at_level(logging.WARNING):
        layout, note = limits_layout("auto", tmp_path, lambda: why)
    assert layout is None and note == f"its CPU and memory limits are not enforced on this node: {why}"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [f"task CPU and memory limits are NOT enforced on this node: {why}"]
    with pytest.raises(RuntimeError, match="task_limits is cgroups, but no cgroup memory controller"):
        limits_layout("cgroups", tmp_path, lambda: why)
    assert limits_layout("none", tmp_path, lambda: pytest.fail("not even looked at")) == (None, "")
    with pytest.raises(ValueError, match="task_limits must be one of auto, cgroups, none"):
        limits_layout("sometimes", tmp_path)


def test_a_task_on_a_node_without_limits_runs_and_its_message_says_so(local, tmp_path):
    backend = LocalBackend(tmp_path / "state", gpus=[], task_limits="none")
    key = TaskKey(1, 0, "main", 0)
    _launch(backend, key, HOG.format(mb=100), memory_mb=16)
    status = local.wait_ended(key, backend=backend, timeout=30)
    assert (status.exit_code, status.reason) == (0, "")  # nothing held it to its 16 MiB
    spec = taskfiles.read_json(str(backend.task_dir(key) / taskfiles.SPEC))
    assert spec is not None and "cgroup" not in spec
    # With the note a node without cgroups gives (auto), the task's message carries it.
    backend.limits_note = "its CPU and memory limits are not enforced on this node: no cgroups"
    key = TaskKey(2, 0, "main", 0)
    _launch(backend, key, "true", memory_mb=16)
    assert local.wait_ended(key, backend=backend).message == backend.limits_note
