"""Live-view fixtures: real jobs started by the real controller on the harness's local
backend (simulated GPUs, real processes), and rounds of samples written to the store as
the sampler writes them (``monitor.history.record``), since the tests choose the figures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from api.harness import Api, make_api
from deadlines import scaled
from e2e.server import kill_tasks_under

from trainyard.controller.loop import Controller
from trainyard.core.clock import Clock
from trainyard.core.metrics import GpuSample, NodeSample, Sampled, TaskSample
from trainyard.core.states import JobState
from trainyard.monitor.history import record
from trainyard.store.rows import JobRow

LAUNCH_TIMEOUT = 20.0


@contextmanager
def live_api(db, tmp_path: Path, clock: Clock | None = None) -> Iterator[tuple[Api, Controller]]:
    """The harness's API and a controller on the same store, backend and clock; at the end its
    periodic threads are waited for and the tasks it started are killed."""
    api = make_api(db, tmp_path / "local", clock)
    controller = Controller(db, api.ctx.backend, api.ctx.clock)
    try:
        yield api, controller
    finally:
        # Its cycles start the periodic work (monitoring, alerts, history) in threads: wait for
        # them, so that none still queries the store when the test's database is dropped.
        controller.stop()
        kill_tasks_under(tmp_path)


def running_job(api: Api, controller: Controller, token: str, name: str, *, instances: int = 1,
                gpus: int = 1) -> int:
    """Submit a job of ``instances`` tasks of ``gpus`` GPUs each that sleeps, and run controller
    cycles until it runs."""
    text = (f"name: {name}\ntaskRoles:\n  worker:\n    instances: {instances}\n"
            f"    resourcePerInstance: {{gpu: {gpus}, cpu: 1, memoryMB: 512}}\n    commands: ['sleep 600']\n")
    with api.sdk(token) as sdk:
        job_id = sdk.submit(text.encode(), content_type="application/yaml").id
    deadline = time.monotonic() + scaled(LAUNCH_TIMEOUT)
    while time.monotonic() < deadline:
        controller.wake()
        controller.run_once()
        with api.ctx.db.session() as session:
            if session.get(JobRow, job_id).state == JobState.RUNNING:  # type: ignore[union-attr]
                return job_id
        time.sleep(0.02)  # the task's process is starting; nothing to await but its report
    raise AssertionError(f"job {name} did not start")


def gpu(index: int, util: float | None, *, memory_used: int = 1000, simulated: bool = False,
        healthy: bool = True) -> GpuSample:
    """A GPU as NVML would report it (the figures are the test's); a simulated one measures
    only what Trainyard's own processes hold on it."""
    return GpuSample(index=index, model="V100", memory_total_mb=16384, util_pct=util, memory_used_mb=memory_used,
                     temperature_c=None if simulated else 61.0, power_w=None if simulated else 180.0,
                     ecc_errors=None if simulated else 0, simulated=simulated, healthy=healthy)


def node_sample(node: str, at: datetime, gpus: tuple[GpuSample, ...] = (), **figures: float) -> NodeSample:
    return NodeSample(node=node, at=at, gpus=gpus, **figures)  # type: ignore[arg-type]


def task_sample(job_id: int, index: int, node: str, at: datetime, **figures: float) -> TaskSample:
    return TaskSample(job_id=job_id, attempt=0, role="worker", index=index, node=node, at=at, **figures)  # type: ignore[arg-type]


def store_round(api: Api, nodes: tuple[NodeSample, ...] = (), tasks: tuple[TaskSample, ...] = ()) -> None:
    with api.ctx.db.session() as session:
        record(session, Sampled(nodes=nodes, tasks=tasks))
