"""The cluster as the scheduler sees it, read from the store for one cycle.

Nodes with what their unfinished tasks hold (allocations are derived, not stored), the
virtual clusters with their quotas, the per-user quotas, and the running work with its
expected end (from ``maxRunTimeSeconds``) and whether it is already being stopped.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.priorities import Priority
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.scheduler.snapshot import (
    GpuShare,
    NodeState,
    RunningJob,
    TaskPlacement,
    VirtualCluster,
)
from trainyard.services import admin
from trainyard.services.jobs import gpu_slot
from trainyard.store.rows import (
    AttemptRow,
    JobRow,
    NodeRow,
    TaskRow,
    UserQuotaRow,
    UserRow,
)

UNFINISHED = (TaskState.WAITING, TaskState.RUNNING)


def node_states_in_use(session: Session) -> tuple[NodeState, ...]:
    """Every node with what its unfinished tasks hold."""
    used_gpu: dict[tuple[str, int], int] = defaultdict(int)
    used_cpu: dict[str, int] = defaultdict(int)
    used_memory: dict[str, int] = defaultdict(int)
    busy = session.execute(
        select(TaskRow.node, TaskRow.gpus, TaskRow.cpu_milli, TaskRow.memory_mb).where(TaskRow.state.in_(UNFINISHED))
    )
    for node, gpus, cpu, memory in busy:
        used_cpu[node] += cpu
        used_memory[node] += memory
        for index, milli in gpus:
            used_gpu[(node, index)] += milli
    return tuple(
        NodeState(
            name=row.name,
            cpu_milli=row.cpu_milli,
            memory_mb=row.memory_mb,
            gpus=tuple(gpu_slot(g, min(1000, used_gpu[(row.name, g["index"])])) for g in row.gpus),
            cpu_used_milli=used_cpu[row.name],
            memory_used_mb=used_memory[row.name],
            schedulable=row.schedulable and not row.cordoned,
            labels=dict(row.labels or {}),
        )
        for row in session.scalars(select(NodeRow).order_by(NodeRow.name))
    )


def virtual_clusters(session: Session) -> tuple[VirtualCluster, ...]:
    """The VCs with their quotas (see ``services.admin.guaranteed_quotas``); none if none is defined."""
    return tuple(
        VirtualCluster(name, quota, preemption)
        for name, (quota, preemption) in admin.guaranteed_quotas(session).items()
    )


def user_quotas(session: Session) -> dict[tuple[str, int], int]:
    """(user, priority rank) -> milli-GPU the user may hold at that priority."""
    query = select(UserRow.name, UserQuotaRow.priority, UserQuotaRow.gpu_milli).join(
        UserRow, UserRow.id == UserQuotaRow.user_id
    )
    return {(user, Priority(priority).rank): milli for user, priority, milli in session.execute(query)}


def running_jobs(session: Session) -> tuple[tuple[RunningJob, ...], frozenset[int]]:
    """Jobs holding resources, and which of them are already being stopped or preempted."""
    rows = session.execute(
        select(
            JobRow.id, JobRow.vc, UserRow.name, JobRow.priority, JobRow.state, JobRow.grace_seconds,
            JobRow.max_runtime_seconds, AttemptRow.state, AttemptRow.started_at, AttemptRow.stop_requested_at,
            TaskRow.role, TaskRow.index, TaskRow.node, TaskRow.gpus, TaskRow.cpu_milli, TaskRow.memory_mb,
        )
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
        .where(JobRow.state.in_([JobState.RUNNING, JobState.STOPPING]), TaskRow.state.in_(UNFINISHED))
        .order_by(JobRow.id, TaskRow.role, TaskRow.index)
    ).all()
    tasks_of: dict[int, list] = defaultdict(list)
    for row in rows:
        tasks_of[row[0]].append(row)
    running, ending = [], set()
    for job_id, tasks in tasks_of.items():
        _, vc, user, priority, state, grace, limit, attempt_state, started, stop_requested, *_ = tasks[0]
        if state == JobState.STOPPING or attempt_state != AttemptState.RUNNING:
            ending.add(job_id)
        end = None if limit is None or started is None else (started + timedelta(seconds=limit)).timestamp()
        placements = tuple(
            TaskPlacement(role, index, node, tuple(GpuShare(i, m) for i, m in gpus), cpu, memory)
            for *_, role, index, node, gpus, cpu, memory in tasks
        )
        running.append(
            RunningJob(
                job_id=job_id,
                vc=vc,
                user=user,
                priority_rank=Priority(priority).rank,
                placements=placements,
                started_at=started.timestamp() if started else 0.0,
                expected_end=end,
                grace_seconds=grace,
                stops_by=None if stop_requested is None else (stop_requested + timedelta(seconds=grace)).timestamp(),
            )
        )
    return tuple(running), frozenset(ending)
