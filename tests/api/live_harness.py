"""Live-view fixtures: real jobs started by the real controller on the harness's local
backend (simulated GPUs, real processes), and rounds of samples written to the store as
the sampler writes them (``monitor.history.record``), since the tests choose the figures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from api.harness import Api, make_api
from worlds import World

from trainyard.controller.loop import Controller
from trainyard.core.clock import Clock
from trainyard.core.metrics import GpuSample, NodeSample, Sampled, TaskSample
from trainyard.core.states import JobState
from trainyard.monitor.history import record

LAUNCH_TIMEOUT = 20.0


@contextmanager
def live_api(db, tmp_path: Path, clock: Clock | None = None) -> Iterator[tuple[Api, Controller]]:
    """The harness's API and a controller on the same store, backend and clock; at the end its
    periodic threads are waited for and the tasks it started are killed."""
    api = make_api(db, tmp_path / "local", clock)
    controller = Controller(db, api.ctx.backend, api.ctx.clock)
    world = World(db, api.ctx.backend, api.ctx.clock, controller, tasks_root=tmp_path)  # type: ignore[arg-type]
    try:
        yield api, controller
    finally:
        world.close()


def running_job(api: Api, controller: Controller, token: str, name: str, *, instances: int = 1,
                gpus: int = 1) -> int:
    """Submit a job of ``instances`` tasks of ``gpus`` GPUs each that sleeps, and run controller
    cycles until it runs."""
    text = (f"name: {name}\ntaskRoles:\n  worker:\n    instances: {instances}\n"
            f"    resourcePerInstance: {{gpu: {gpus}, cpu: 1, memoryMB: 512}}\n    commands: ['sleep 600']\n")
    with api.sdk(token) as sdk:
        job_id = sdk.submit(text.encode(), content_type="application/yaml").id
    world = World(api.ctx.db, api.ctx.backend, api.ctx.clock, controller)  # type: ignore[arg-type]
    world.drive(job_id, (JobState.RUNNING,), timeout=LAUNCH_TIMEOUT, what=f"job {name} to start")
    return job_id


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
