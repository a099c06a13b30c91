"""Turn placed tasks into ``TaskLaunch`` requests: the rendered script and the full env."""

from __future__ import annotations

import json

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.core.wiring import JobWiring, PlacedTask, task_env
from trainyard.spec.models import JobSpec
from trainyard.spec.templating import render_role
from trainyard.store.rows import AttemptRow, JobRow, TaskRow


def task_key(job: JobRow, attempt: AttemptRow, task: TaskRow) -> TaskKey:
    return TaskKey(job.id, attempt.number, task.role, task.index, task.run)


def _resource_string(spec: JobSpec, role: str) -> str:
    res = spec.taskRoles[role].resourcePerInstance
    return f"{res.gpu:g},{res.cpu:g},{res.memoryMB},0"


def build_launch(
    job: JobRow, attempt: AttemptRow, task: TaskRow, spec: JobSpec, addresses: dict[str, str]
) -> TaskLaunch:
    wiring = JobWiring(
        job_id=job.id,
        job_name=job.name,
        user=job.user.name,
        attempt=attempt.number,
        roles=spec.role_names,
        tasks=[
            PlacedTask(t.role, t.index, t.node, addresses.get(t.node, t.node), tuple(g[0] for g in t.gpus), t.ports)
            for t in attempt.tasks
        ],
        master_port=attempt.master_port or 0,
        resources={role: _resource_string(spec, role) for role in spec.role_names},
    )
    commands, role_env = render_role(spec, task.role)
    wired = task_env(wiring, task.role, task.index)
    env = {**wired, **role_env}
    # Trainyard's own identifiers always describe the truth, whatever the job file says.
    env.update({k: v for k, v in wired.items() if k.startswith("TRAINYARD_")})
    env["TRAINYARD_TASK_RUN"] = str(task.run)
    return TaskLaunch(
        key=task_key(job, attempt, task),
        node=task.node,
        script="\n".join(commands) + "\n",
        env=env,
        gpus=tuple(g[0] for g in task.gpus),
        grace_seconds=job.grace_seconds,
        cpu_milli=task.cpu_milli,
        memory_mb=task.memory_mb,
        gpu_milli=tuple(g[1] for g in task.gpus),
        user=job.user.name,
        secrets={name: secret_text(value) for name, value in spec.secrets.items()},
    )


def secret_text(value: object) -> str:
    """A secret as the text of its file: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
