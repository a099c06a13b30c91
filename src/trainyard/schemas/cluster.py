"""The API's models of the cluster: nodes and their GPUs, what they allocate and what their
newest samples measured, and the live view of running jobs (``GET /top``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from trainyard.core.states import JobState


class GpuUsageView(BaseModel):
    """What a GPU's newest fresh sample measured; a null figure was not measured (a simulated
    GPU has no utilisation)."""

    utilPct: float | None
    memoryUsedMB: int | None
    temperatureC: float | None
    powerW: float | None
    eccErrors: int | None
    healthy: bool


class NodeUsageView(BaseModel):
    """What a node's newest fresh sample measured (null figures: not measured)."""

    sampledAt: datetime
    cpuPct: float | None  # of all the node's CPUs, 0-100
    load1: float | None
    memoryUsedMB: int | None
    memoryTotalMB: int | None
    diskUsedPct: float | None


class GpuView(BaseModel):
    index: int
    model: str
    memoryMB: int
    simulated: bool
    used: float  # fraction of the device allocated, 0..1
    jobs: list[int]
    usage: GpuUsageView | None = None  # null: no fresh sample of this GPU


class NodeView(BaseModel):
    name: str
    backend: str
    address: str
    schedulable: bool  # false when cordoned, too
    cpu: float
    cpuUsed: float
    memoryMB: int
    memoryUsedMB: int
    gpus: list[GpuView]
    simulated: bool
    cordoned: bool
    labels: dict[str, str]  # as the scheduler sees them: the backend's, then the admin's
    adminLabels: dict[str, str | None] = {}  # set by admins (null: a reported label removed)
    usage: NodeUsageView | None = None  # null: no fresh sample of this node


class JobUsageView(BaseModel):
    """A running job with its tasks' newest fresh samples summed (GPU utilisation: the mean
    over the GPUs its sampled tasks hold); null where no task's figure was measured."""

    id: int
    name: str
    user: str
    vc: str
    state: JobState
    gpus: float  # allocated
    tasks: int
    tasksSampled: int
    gpuUtilPct: float | None
    gpuMemoryMB: int | None
    cpuCores: float | None
    memoryMB: int | None
    runtimeSeconds: float | None
    sampledAt: datetime | None


class TopView(BaseModel):
    """``GET /top``: the cluster's live view — nodes with allocation beside use, and the
    running jobs the caller may see, busiest GPUs first."""

    at: datetime
    freshSeconds: float  # samples older than this are not shown (their figures are null)
    nodes: list[NodeView]
    jobs: list[JobUsageView]
