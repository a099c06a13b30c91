"""The schedule step: snapshot from the store, ``scheduler.schedule``, decisions written back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.states import JobState, TaskState, check_job_transition
from trainyard.scheduler.snapshot import (
    Decisions,
    GpuSlot,
    NodeState,
    PendingJob,
    Snapshot,
    StartJob,
)
from trainyard.services.jobs import record_event
from trainyard.services.requests import task_requests
from trainyard.spec.models import JobSpec
from trainyard.store.rows import AttemptRow, JobRow, NodeRow, TaskRow


@dataclass(frozen=True)
class PortPlan:
    master_port: int
    ports: dict[tuple[str, int], dict[str, list[int]]]  # (role, index) -> label -> ports


def build_snapshot(
    session: Session, spec_of: Callable[[JobRow], JobSpec], now: float
) -> tuple[Snapshot, dict[int, JobRow]]:
    """The cluster as the scheduler sees it: free capacity and the waiting jobs."""
    busy = list(
        session.scalars(select(TaskRow).where(TaskRow.state.in_([TaskState.WAITING, TaskState.RUNNING])))
    )
    nodes = []
    for row in session.scalars(select(NodeRow).order_by(NodeRow.name)):
        mine = [t for t in busy if t.node == row.name]
        used = {g["index"]: 0 for g in row.gpus}
        for task in mine:
            for index, milli in task.gpus:
                used[index] = used.get(index, 0) + milli
        nodes.append(
            NodeState(
                name=row.name,
                cpu_milli=row.cpu_milli,
                memory_mb=row.memory_mb,
                gpus=tuple(
                    GpuSlot(g["index"], g["model"], g["memory_mb"], min(1000, used[g["index"]]))
                    for g in row.gpus
                ),
                cpu_used_milli=sum(t.cpu_milli for t in mine),
                memory_used_mb=sum(t.memory_mb for t in mine),
                schedulable=row.schedulable,
            )
        )
    waiting = {j.id: j for j in session.scalars(select(JobRow).where(JobRow.state == JobState.WAITING))}
    pending = []
    for job in waiting.values():
        spec = spec_of(job)
        pending.append(
            PendingJob(
                job_id=job.id,
                priority_rank=spec.priority.rank,
                submitted_at=job.submitted_at.timestamp(),
                tasks=task_requests(spec),
                user=job.user.name,
                vc=job.vc,
            )
        )
    return Snapshot(nodes=tuple(nodes), pending=tuple(pending), now=now), waiting


def apply_decisions(
    session: Session,
    decisions: Decisions,
    waiting: dict[int, JobRow],
    ports: dict[int, PortPlan],
    clock: Clock,
) -> list[int]:
    """Write placements and pending reasons; returns the ids of the jobs that start."""
    started = []
    for start in decisions.starts:
        job = waiting.get(start.job_id)
        if job is None or job.state != JobState.WAITING:
            continue  # stopped since the snapshot was taken
        _place(session, job, start, ports[start.job_id], clock)
        started.append(job.id)
    for wait in decisions.waits:
        job = waiting.get(wait.job_id)
        if job is None or job.state != JobState.WAITING:
            continue
        values = (str(wait.reason), wait.message, wait.position)
        if (job.pending_reason, job.pending_message, job.pending_position) != values:
            job.pending_reason, job.pending_message, job.pending_position = values
    return started


def _place(session: Session, job: JobRow, start: StartJob, plan: PortPlan, clock: Clock) -> None:
    now = clock.now()
    job.state = check_job_transition(JobState(job.state), JobState.RUNNING)
    job.pending_reason = job.pending_message = None
    job.pending_position = None
    job.state_message = ""
    attempt = AttemptRow(
        job_id=job.id, number=job.attempt, state="RUNNING", started_at=now, master_port=plan.master_port
    )
    session.add(attempt)
    session.flush()
    for p in start.placements:
        session.add(
            TaskRow(
                attempt_id=attempt.id,
                job_id=job.id,
                role=p.role,
                index=p.index,
                state=TaskState.WAITING,
                node=p.node,
                gpus=[[g.index, g.milli] for g in p.gpus],
                cpu_milli=p.cpu_milli,
                memory_mb=p.memory_mb,
                ports=plan.ports.get((p.role, p.index), {}),
                run=0,
            )
        )
    where = ", ".join(
        f"{p.role}/{p.index} on {p.node}"
        + (f" GPU {','.join(str(g.index) for g in p.gpus)}" if p.gpus else "")
        for p in start.placements
    )
    record_event(session, job, "placed", f"attempt {job.attempt} placed: {where}", clock)
