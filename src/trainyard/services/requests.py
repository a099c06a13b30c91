"""Translate a job spec into the scheduler's task requests."""

from __future__ import annotations

from trainyard.core.resources import to_milli
from trainyard.scheduler.snapshot import TaskRequest
from trainyard.spec.models import JobSpec


def task_requests(spec: JobSpec) -> tuple[TaskRequest, ...]:
    requests: list[TaskRequest] = []
    for role_name, role in spec.taskRoles.items():
        res = role.resourcePerInstance
        for index in range(role.instances):
            requests.append(
                TaskRequest(
                    role=role_name,
                    index=index,
                    gpu_milli=to_milli(res.gpu),
                    cpu_milli=to_milli(res.cpu),
                    memory_mb=res.memoryMB,
                    gpu_models=tuple(res.gpuModel or ()),
                    gpu_memory_mb=res.gpuMemoryMB or 0,
                    selector=res.selector or "",
                )
            )
    return tuple(requests)
