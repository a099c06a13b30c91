"""The API's models of the monitoring history: a job's figures per task, a node's, over a
window. A figure that was not measured is null, shown as "n/a" (a simulated GPU has no
utilisation)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class TaskPointView(BaseModel):
    """A task's figures at ``at`` (raw), or averaged over ``step`` seconds from ``at``."""

    at: datetime
    cpuCores: float | None  # 1.0 = one core busy
    memoryMB: int | None
    gpusHeld: float  # allocated; a fraction shares a device
    gpuUtilPct: float | None  # mean over the devices it holds; null: n/a
    gpuMemoryMB: int | None
    diskReadBytesPerSecond: float | None
    diskWriteBytesPerSecond: float | None


class TaskSeriesView(BaseModel):
    role: str
    index: int
    points: list[TaskPointView]


class JobMetrics(BaseModel):
    """A job's figures over ``since``..``until``, one series per task; ``step`` is the seconds a
    point covers (0: raw samples), the finest the history keeps for the window."""

    job: int
    since: datetime
    until: datetime
    step: int
    tasks: list[TaskSeriesView]


class GpuPointView(BaseModel):
    index: int
    model: str
    utilPct: float | None
    memoryUsedMB: int | None
    memoryTotalMB: int | None
    temperatureC: float | None
    powerW: float | None
    eccErrors: int | None
    simulated: bool
    healthy: bool


class NodePointView(BaseModel):
    at: datetime
    cpuPct: float | None  # of all the node's CPUs
    load1: float | None
    memoryUsedMB: int | None
    memoryTotalMB: int | None
    diskUsedPct: float | None
    netRxBytesPerSecond: float | None
    netTxBytesPerSecond: float | None
    gpus: list[GpuPointView]


class NodeMetrics(BaseModel):
    """A node's figures over ``since``..``until``; ``step`` as for ``JobMetrics``."""

    node: str
    since: datetime
    until: datetime
    step: int
    points: list[NodePointView]
