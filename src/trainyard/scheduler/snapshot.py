"""The scheduler's inputs and outputs: an immutable snapshot in, decisions out.

Contract (as HiveD writes at the top of its core): inputs are read-only, ``schedule`` is
never called concurrently with itself, and the same snapshot always yields the same
decisions. The live controller and the simulator build these from their own worlds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class GpuSlot:
    index: int
    model: str
    memory_mb: int
    used_milli: int = 0  # already allocated, 0..1000


@dataclass(frozen=True)
class NodeState:
    name: str
    cpu_milli: int
    memory_mb: int
    gpus: tuple[GpuSlot, ...] = ()
    cpu_used_milli: int = 0
    memory_used_mb: int = 0
    schedulable: bool = True


@dataclass(frozen=True)
class TaskRequest:
    role: str
    index: int
    gpu_milli: int = 0
    cpu_milli: int = 1000
    memory_mb: int = 1024
    gpu_models: tuple[str, ...] = ()  # empty: any model
    gpu_memory_mb: int = 0  # minimum memory per device


@dataclass(frozen=True)
class PendingJob:
    job_id: int
    priority_rank: int  # 0 is the highest priority
    submitted_at: float  # seconds; only the order matters
    tasks: tuple[TaskRequest, ...]
    user: str = ""
    vc: str = "default"


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    pending: tuple[PendingJob, ...]
    now: float = 0.0


class PendingReason(StrEnum):
    NO_FIT = "NO_FIT"  # the free resources cannot hold the gang right now
    BEHIND = "BEHIND"  # resources are held for jobs ahead in the queue
    QUOTA = "QUOTA"
    USER_QUOTA = "USER_QUOTA"
    RESERVED = "RESERVED"


@dataclass(frozen=True)
class GpuShare:
    index: int
    milli: int  # 1000 for a whole device


@dataclass(frozen=True)
class TaskPlacement:
    role: str
    index: int
    node: str
    gpus: tuple[GpuShare, ...] = ()
    cpu_milli: int = 0
    memory_mb: int = 0


@dataclass(frozen=True)
class StartJob:
    job_id: int
    placements: tuple[TaskPlacement, ...]


@dataclass(frozen=True)
class KeepWaiting:
    job_id: int
    reason: PendingReason
    message: str
    position: int  # 1-based place among the jobs still waiting after this cycle


@dataclass(frozen=True)
class Decisions:
    starts: tuple[StartJob, ...] = ()
    waits: tuple[KeepWaiting, ...] = field(default_factory=tuple)
