"""The API's models of the cluster: nodes and their GPUs, and the server's health."""

from __future__ import annotations

from pydantic import BaseModel


class GpuView(BaseModel):
    index: int
    model: str
    memoryMB: int
    simulated: bool
    used: float  # fraction of the device allocated, 0..1
    jobs: list[int]


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
    labels: dict[str, str]
