"""What monitoring measures: one sample of a node, of its GPUs, of a task's processes.

The vocabulary shared by the backends that take samples (``backends/``: NVML and psutil
on the local machine, Slurm's node figures and the task runner's own samples on a
cluster), the history that keeps them (``monitor/``, ``store/``), and what shows them (API,
``/metrics``, ``yard top``). A figure that was not measured is ``None`` and is shown as
"n/a" — a simulated GPU has no utilisation, and none is ever invented.

Units are base units or the project's usual ones, named in each field: percent (0-100),
MiB, watts, degrees Celsius, bytes per second, CPU cores (1.0 = one core busy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class GpuSample:
    """One GPU device at one moment."""

    index: int
    model: str
    memory_total_mb: int
    util_pct: float | None = None  # busy time of the device over the last sample period
    memory_used_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_errors: int | None = None  # uncorrected (double-bit) errors, volatile count
    simulated: bool = False
    healthy: bool = True  # False: the device stopped answering (NVML "GPU is lost") or vanished
    pids: tuple[int, ...] = ()  # processes using the device, for attribution to tasks


@dataclass(frozen=True)
class NodeSample:
    """One node at one moment."""

    node: str
    at: datetime
    cpu_pct: float | None = None  # of all the node's CPUs
    load1: float | None = None
    memory_used_mb: int | None = None
    memory_total_mb: int | None = None
    disk_used_pct: float | None = None  # the file system that holds Trainyard's state
    net_rx_bytes_per_s: float | None = None
    net_tx_bytes_per_s: float | None = None
    gpus: tuple[GpuSample, ...] = ()


@dataclass(frozen=True)
class TaskSample:
    """One running task (its whole process tree) at one moment."""

    job_id: int
    attempt: int
    role: str
    index: int
    node: str
    at: datetime
    cpu_cores: float | None = None
    memory_mb: int | None = None
    gpus_held: float = 0.0  # allocated GPUs (a fraction shares one device)
    gpu_util_pct: float | None = None  # mean over the devices it holds; None: n/a (simulated)
    gpu_memory_mb: int | None = None  # its processes' memory on its devices
    disk_read_bytes_per_s: float | None = None
    disk_write_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Sampled:
    """What one round of sampling found."""

    nodes: tuple[NodeSample, ...] = ()
    tasks: tuple[TaskSample, ...] = ()
    errors: tuple[str, ...] = field(default=())  # what could not be measured, said once per round
