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

from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.scheduler.snapshot import (
    GpuShare,
    NodeState,
    RunningJob,
    TaskPlacement,
    VirtualCluster,
)
from trainyard.services.admin import ANY_MODEL, DEFAULT_VC
from trainyard.services.jobs import gpu_slot
from trainyard.spec.models import Priority
from trainyard.store.rows import (
    AttemptRow,
    JobRow,
    NodeRow,
    TaskRow,
    UserQuotaRow,
    UserRow,
    VirtualClusterRow,
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


def virtual_clusters(session: Session, nodes: tuple[NodeState, ...]) -> tuple[VirtualCluster, ...]:
    """The VCs with their quotas; ``default`` guarantees what no other VC does.

    With no VC defined the answer is empty: every job shares the cluster without limits.
    A quota for any model (``*``) applies to the cluster's model; on a cluster with several
    models it is ambiguous and guarantees nothing (``yard vc list`` says so; the admin
    sets one quota per model).
    """
    rows = list(session.scalars(select(VirtualClusterRow).order_by(VirtualClusterRow.name)))
    if not rows:
        return ()
    capacity: dict[str, int] = defaultdict(int)
    for node in nodes:
        for gpu in node.gpus:
            capacity[gpu.model] += 1
    only_model = next(iter(capacity)) if len(capacity) == 1 else None
    promised: dict[str, int] = defaultdict(int)
    vcs = []
    for row in rows:
        quota: dict[str, int] = defaultdict(int)
        for q in row.quotas:
            model = only_model if q.gpu_model == ANY_MODEL else q.gpu_model
            if model is not None:
                quota[model] += q.gpus
                promised[model] += q.gpus
        vcs.append(VirtualCluster(row.name, dict(quota), row.allow_priority_preemption))
    rest = {model: count - promised[model] for model, count in capacity.items() if count > promised[model]}
    return (VirtualCluster(DEFAULT_VC, rest, True), *vcs)


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
            JobRow.max_runtime_seconds, AttemptRow.state, AttemptRow.started_at,
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
        _, vc, user, priority, state, grace, limit, attempt_state, started, *_ = tasks[0]
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
            )
        )
    return tuple(running), frozenset(ending)
