"""Translate a job spec into the scheduler's task requests."""

from __future__ import annotations

from trainyard.core.resources import to_milli
from trainyard.scheduler.snapshot import TaskRequest
from trainyard.spec.models import JobSpec, TaskRole


def grow_requests(spec: JobSpec, indices: range | list[int]) -> tuple[TaskRequest, ...]:
    """The requests of the elastic role's workers ``indices`` (beyond its minimum); () for
    a job of fixed size."""
    role = spec.elastic_role
    if role is None:
        return ()
    return tuple(_request(role, spec.taskRoles[role], index) for index in indices)


def elastic_growth(spec: JobSpec) -> tuple[TaskRequest, ...]:
    """What a waiting elastic job may add once its minimum starts: its elastic role's
    instances ``min`` to ``max - 1``."""
    role = spec.elastic_role
    if role is None:
        return ()
    task_role = spec.taskRoles[role]
    return grow_requests(spec, range(task_role.instances, task_role.maxInstances or task_role.instances))


def task_requests(spec: JobSpec) -> tuple[TaskRequest, ...]:
    """One request per instance (an elastic role's: its minimum). A whole-node role's
    (``nodes``) name no amounts: the scheduler gives each the least a suitable node offers
    (``scheduler.whole_nodes``)."""
    requests: list[TaskRequest] = []
    for role_name, role in spec.taskRoles.items():
        for index in range(role.instances):
            requests.append(_request(role_name, role, index))
    return tuple(requests)


def _request(role_name: str, role: TaskRole, index: int) -> TaskRequest:
    res = role.resourcePerInstance
    if role.whole_nodes:
        return TaskRequest(
            role=role_name,
            index=index,
            gpu_milli=0,
            cpu_milli=0,
            memory_mb=0,
            gpu_models=tuple(res.gpuModel or ()),
            gpu_memory_mb=res.gpuMemoryMB or 0,
            whole_node=True,
        )
    return TaskRequest(
        role=role_name,
        index=index,
        gpu_milli=to_milli(res.gpu),
        cpu_milli=to_milli(res.cpu),
        memory_mb=res.memoryMB,
        gpu_models=tuple(res.gpuModel or ()),
        gpu_memory_mb=res.gpuMemoryMB or 0,
        selector=res.selector or "",
    )
