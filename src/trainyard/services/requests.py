"""Translate a job spec into the scheduler's task requests."""

from __future__ import annotations

from trainyard.core.resources import to_milli
from trainyard.scheduler.snapshot import TaskRequest
from trainyard.spec.models import JobSpec


def task_requests(spec: JobSpec) -> tuple[TaskRequest, ...]:
    """One request per instance. A whole-node role's (``nodes``) name no amounts: the
    scheduler gives each the least a suitable node offers (``scheduler.whole_nodes``)."""
    requests: list[TaskRequest] = []
    for role_name, role in spec.taskRoles.items():
        res = role.resourcePerInstance
        for index in range(role.instances):
            if role.whole_nodes:
                requests.append(
                    TaskRequest(
                        role=role_name,
                        index=index,
                        gpu_milli=0,
                        cpu_milli=0,
                        memory_mb=0,
                        gpu_models=tuple(res.gpuModel or ()),
                        gpu_memory_mb=res.gpuMemoryMB or 0,
                        whole_node=True,
                    )
                )
                continue
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
