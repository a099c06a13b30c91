"""Sampling the local machine and its tasks' real process trees (psutil), and its GPUs through
the NVML stand-in (``tests/standins/nvml.py``, the ``fake_nvml`` fixture)."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from e2e.server import kill_tasks_under

from trainyard.backends.base import MetricsSource, TaskKey
from trainyard.core.metrics import Sampled, TaskSample

# Writes its pid to ./busy, then spins on one core.
BUSY = f"{sys.executable} -c 'import os; open(\"busy\", \"w\").write(str(os.getpid())); any(iter(int, 1))'"
# Writes its pid to ./NAME, then sleeps: a process of the task's tree whose pid the test knows.
SLEEPER = f"{sys.executable} -c 'import os, time; open(\"{{name}}\", \"w\").write(str(os.getpid())); time.sleep(300)'"


def _now() -> datetime:
    return datetime.now(UTC)


def _task(sampled: Sampled, key: TaskKey) -> TaskSample:
    [task] = [t for t in sampled.tasks if (t.job_id, t.role, t.index) == (key.job_id, key.role, key.index)]
    return task


def _pid_in(local: Any, key: TaskKey, name: str) -> int:
    path = local.backend.work_dir(key) / name
    local.wait_until(lambda: path.exists() and path.read_text().strip())
    return int(path.read_text())


@pytest.fixture
def stop_all():
    """Stops every task launched through the harnesses it is given, whatever the test did,
    and kills what a stop of the task's group leaves running (a ``setsid`` busy loop)."""
    launched: list[tuple[Any, TaskKey]] = []
    yield launched
    for local, key in launched:
        local.backend.stop(key, 0)
        local.wait_ended(key)
    for state_dir in {local.state_dir for local, _ in launched}:
        kill_tasks_under(state_dir)


def test_a_busy_task_is_measured_through_its_whole_process_tree(local: Any, stop_all) -> None:
    assert isinstance(local.backend, MetricsSource)
    # The busy loop is a grandchild that left the task's process group: still the task's.
    key = local.launch(f"setsid {BUSY} &\n{SLEEPER.format(name='sleeper')}\n", gpus=(1,))
    stop_all.append((local, key))
    _pid_in(local, key, "sleeper")
    busy = psutil.Process(_pid_in(local, key, "busy"))
    first = local.backend.sample(_now(), {key: (1,)})
    spent, began = sum(busy.cpu_times()[:2]), time.monotonic()
    time.sleep(1.0)  # the rate is measured over real time: the busy loop must run a while
    second = local.backend.sample(_now(), {key: (1,)})
    # What the busy loop got, measured apart; this shared machine may give it well under a core.
    busy_cores = (sum(busy.cpu_times()[:2]) - spent) / (time.monotonic() - began)
    assert busy_cores > 0.1
    # First sight: the average over the task's life (Python's start-up included).
    assert _task(first, key).cpu_cores > 0  # type: ignore[operator]
    assert 0.6 * busy_cores < _task(second, key).cpu_cores < busy_cores + 0.3  # type: ignore[operator]
    for sampled in (first, second):
        task = _task(sampled, key)
        assert task.memory_mb is not None and task.memory_mb > 5
        assert task.node == local.node and task.gpus_held == 1.0
        # Simulated GPUs: no utilisation or GPU memory is invented.
        assert task.gpu_util_pct is None and task.gpu_memory_mb is None
    [node] = second.nodes
    assert node.node == local.node and node.load1 is not None
    assert node.memory_total_mb and 0 < node.memory_used_mb <= node.memory_total_mb  # type: ignore[operator]
    assert node.disk_used_pct is not None and 0 < node.disk_used_pct <= 100
    assert node.cpu_pct is not None and 0 <= node.cpu_pct <= 100  # a rate: from the second round on
    assert node.net_rx_bytes_per_s is not None and node.net_rx_bytes_per_s >= 0
    assert first.nodes[0].cpu_pct is None  # no earlier round to measure against
    assert [g.index for g in node.gpus] == [0, 1, 2, 3]
    assert all(g.simulated and g.util_pct is None and g.memory_used_mb is None and g.temperature_c is None
               for g in node.gpus)


def test_tasks_without_a_process_are_left_out(local: Any) -> None:
    never_launched = TaskKey(job_id=99, attempt=0, role="w", index=0)
    sampled = local.backend.sample(_now(), {never_launched: ()})
    assert sampled.tasks == () and len(sampled.nodes) == 1


def test_gpu_figures_and_attribution_to_tasks_by_pid(fake_nvml, make_local, tmp_path: Path, stop_all) -> None:
    local = make_local(tmp_path / "state")  # discovers the stand-in's eight H100s, not simulated slots
    assert [g.model for g in local.backend.inventory()[0].gpus] == ["NVIDIA H100 80GB HBM3"] * 8
    trainer = local.launch(f"{SLEEPER.format(name='a')} &\n{SLEEPER.format(name='b')}\n", gpus=(0, 1))
    other = local.launch(SLEEPER.format(name="c"), gpus=(2,))
    stop_all.extend([(local, trainer), (local, other)])
    a, b, c = _pid_in(local, trainer, "a"), _pid_in(local, trainer, "b"), _pid_in(local, other, "c")
    mib = 1024 * 1024
    gpus = fake_nvml.gpus
    gpus[0].util, gpus[0].memory_used, gpus[0].processes = 80, 3000 * mib, {a: 2000 * mib, b: 1000 * mib}
    gpus[1].util, gpus[1].memory_used, gpus[1].processes = 40, 500 * mib, {b: 500 * mib}
    gpus[2].util, gpus[2].processes = 95, {c: 7000 * mib, os.getpid(): 100 * mib}  # a stranger shares it
    gpus[3].ecc_uncorrected = 2
    gpus[4].ecc_supported = False
    gpus[5].temperature, gpus[5].power_mw = 71, 312_500
    gpus[6].lost = True
    del gpus[7]  # fell off the bus

    sampled = local.backend.sample(_now(), {trainer: (0, 1), other: (2,)})

    by_index = {g.index: g for g in sampled.nodes[0].gpus}
    assert by_index[0].util_pct == 80 and by_index[0].memory_used_mb == 3000
    assert by_index[0].memory_total_mb == 81559 and not by_index[0].simulated
    assert set(by_index[0].pids) == {a, b}
    assert by_index[3].ecc_errors == 2 and by_index[0].ecc_errors == 0 and by_index[4].ecc_errors is None
    assert (by_index[5].temperature_c, by_index[5].power_w) == (71, 312.5)
    assert [i for i, g in sorted(by_index.items()) if not g.healthy] == [6, 7]
    assert by_index[6].util_pct is None and by_index[6].memory_used_mb is None
    first, second = _task(sampled, trainer), _task(sampled, other)
    assert (first.gpu_util_pct, first.gpu_memory_mb, first.gpus_held) == (60, 3500, 2.0)
    assert (second.gpu_util_pct, second.gpu_memory_mb) == (95, 7000)  # the stranger's 100 MiB is not its


def test_a_gpu_task_whose_device_is_lost_has_no_utilisation(fake_nvml, make_local, tmp_path: Path, stop_all) -> None:
    local = make_local(tmp_path / "state")
    key = local.launch(SLEEPER.format(name="a"), gpus=(0, 1))
    stop_all.append((local, key))
    fake_nvml.gpus[0].util = 50
    fake_nvml.gpus[1].lost = True
    _pid_in(local, key, "a")
    task = _task(local.backend.sample(_now(), {key: (0, 1)}), key)
    assert task.gpu_util_pct is None and task.cpu_cores is not None
