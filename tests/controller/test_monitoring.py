"""The controller's monitoring tick: a real controller, the real local backend and a real running
task, sampled into the store (SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime, timedelta

import psutil
import pytest
from deadlines import scaled
from worlds import World

from trainyard.backends.base import MetricsSource, TaskKey
from trainyard.backends.local import taskfiles
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.loop import Controller
from trainyard.core.clock import FakeClock
from trainyard.core.metrics import Sampled
from trainyard.store.queries import metrics as metric_queries

INTERVAL = 10.0
BUSY_JOB = f"""
name: busy
taskRoles:
  trainer:
    resourcePerInstance: {{gpu: 1, cpu: 1, memoryMB: 512}}
    commands:
      - {sys.executable} -c 'any(iter(int, 1))'
"""


@pytest.fixture
def monitored(make_world) -> World:
    world = make_world(gpus=2, cpu_milli=4000, memory_mb=4096, clock=FakeClock(datetime.now(UTC)),
                       monitor_interval_seconds=INTERVAL)
    assert world.controller.monitoring is not None
    world.controller.monitoring.join()
    return world


def _busy_process(backend: LocalBackend, job_id: int) -> psutil.Process:
    """The task's busy loop, found from its claim (``pid.json``) once it has one."""
    claim = taskfiles.read_json(str(backend.task_dir(TaskKey(job_id, 0, "trainer", 0)) / taskfiles.PID))
    leader = psutil.Process(claim["task"]["pgid"])  # type: ignore[index]
    return next(p for p in [leader, *leader.children(recursive=True)] if "iter(int" in " ".join(p.cmdline()))


def test_a_running_task_and_its_node_are_sampled_into_the_store(db, monitored: World) -> None:
    backend, controller, clock = monitored.backend, monitored.controller, monitored.clock
    job_id = monitored.submit(BUSY_JOB)
    monitored.drive(job_id, states=("RUNNING",))
    monitoring = controller.monitoring
    assert monitoring is not None
    busy = _wait_for_busy(backend, job_id)
    clock.advance(INTERVAL)
    controller.run_once()  # the controller's own cycle starts a round, in the background
    monitoring.join()
    spent, began = sum(busy.cpu_times()[:2]), time.monotonic()
    time.sleep(1.0)  # a rate is measured over real time
    clock.advance(INTERVAL)
    controller.run_once()
    monitoring.join()
    busy_cores = (sum(busy.cpu_times()[:2]) - spent) / (time.monotonic() - began)

    with db.session() as s:
        [row] = metric_queries.latest_task_samples(s, clock.now() - timedelta(seconds=1))
        node_name = backend.inventory()[0].name
        assert (row.job_id, row.attempt, row.role, row.index, row.node) == (job_id, 0, "trainer", 0, node_name)
        assert row.at == clock.now()
        # This shared machine may give the busy loop well under a core: compare with what it got.
        assert row.cpu_cores is not None and 0.6 * busy_cores < row.cpu_cores < busy_cores + 0.3
        assert busy_cores > 0.5 or row.cpu_cores > 0.1
        assert row.memory_mb is not None and row.memory_mb > 0
        assert row.gpus_held == 1.0
        assert row.gpu_util_pct is None and row.gpu_memory_mb is None  # simulated: n/a, never invented
        [node] = metric_queries.latest_node_samples(s, clock.now() - timedelta(seconds=1))
        assert node.node == node_name and node.cpu_pct is not None and node.load1 is not None
        assert node.memory_total_mb and node.memory_used_mb and node.disk_used_pct
        gpus = node.gpu_dicts()
        assert [(g["index"], g["simulated"], g["util_pct"]) for g in gpus] == [(0, True, None), (1, True, None)]
    assert monitoring.rounds == 3 and monitoring.last_round_seconds is not None


def _wait_for_busy(backend: LocalBackend, job_id: int) -> psutil.Process:
    deadline = time.monotonic() + scaled(10)
    while True:
        try:
            return _busy_process(backend, job_id)
        except (TypeError, KeyError, StopIteration, psutil.Error):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_rounds_start_at_most_once_per_interval(db, monitored: World) -> None:
    controller, clock = monitored.controller, monitored.clock
    monitoring = controller.monitoring
    assert monitoring is not None and monitoring.rounds == 1  # the fixture's first cycle
    controller.run_once()
    monitoring.join()
    assert monitoring.rounds == 1
    clock.advance(INTERVAL - 0.5)
    assert not monitoring.start_if_due()
    clock.advance(0.5)
    assert monitoring.start_if_due()
    monitoring.join()
    assert monitoring.rounds == 2


class _Failing:
    """A backend whose sampling breaks: the round fails, the loop goes on."""

    def __init__(self, backend: LocalBackend) -> None:
        self.backend = backend

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def sample(self, now, running) -> Sampled:
        raise OSError("the sensor fell off")


def test_a_failing_round_is_logged_once_and_never_stops_the_loop(db, tmp_path, caplog) -> None:
    backend = _Failing(LocalBackend(tmp_path / "local", gpus=simulated_gpus(1)))
    assert isinstance(backend, MetricsSource)
    clock = FakeClock(datetime.now(UTC))
    controller = Controller(db, backend, clock)  # type: ignore[arg-type]
    monitoring = controller.monitoring
    assert monitoring is not None
    with caplog.at_level(logging.DEBUG, logger="trainyard.controller.monitoring"):
        for _ in range(3):
            controller.run_once()
            monitoring.join()
            clock.advance(monitoring.interval)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "sensor fell off" in r.getMessage()]
    assert len(warnings) == 1 and controller.cycles == 3
    with db.session() as s:
        assert metric_queries.latest_node_samples(s, clock.now() - timedelta(days=1)) == []
