"""The converters from store rows to the API's response models (``trainyard.schemas``).

Secrets never leave through here: job specs are masked on the way out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from trainyard.core import transitions
from trainyard.core.jobfile import instance_span
from trainyard.core.labels import merged_labels
from trainyard.core.lifecycle import platform_retries_used, run_seconds
from trainyard.core.resources import from_milli
from trainyard.core.states import QUEUED_JOB_STATES, AttemptState, JobState, TaskState
from trainyard.schemas.admin import GroupView, UserQuotaView
from trainyard.schemas.cluster import GpuUsageView, GpuView, JobUsageView, NodeUsageView, NodeView
from trainyard.schemas.jobs import (
    AttemptView,
    EventView,
    JobDetail,
    JobSummary,
    PendingView,
    SizeView,
    SubmitResult,
    TaskView,
)
from trainyard.schemas.users import TokenView, UserView
from trainyard.spec.models import JobSpec
from trainyard.spec.templating import masked_spec
from trainyard.store.rows import (
    AttemptRow,
    GroupRow,
    JobEventRow,
    JobRow,
    NodeLatestRow,
    NodeRow,
    TaskLatestRow,
    TaskRow,
    TokenRow,
    UserRow,
)


def _pending(row: JobRow) -> PendingView | None:
    if row.state not in QUEUED_JOB_STATES or row.held_by or not row.pending_reason:
        return None
    return PendingView(
        reason=row.pending_reason,
        message=row.pending_message or "",
        short=row.pending_short or "",
        position=row.pending_position or None,  # 0: no place in a queue (DEPENDENCY)
        estimatedStart=row.pending_eta,
    )


def total_gpus(spec: dict[str, Any], attempts: Sequence[AttemptRow] = ()) -> float:
    """The GPUs the job asks for. A whole-node role (``nodes``) names no amount: it counts the
    GPUs its tasks were given in ``attempts``' latest (the caller passes none while the job
    waits to be placed again: its next node may differ). An elastic role counts its minimum,
    or, while that attempt runs workers of it, the GPUs they hold (a grown job's)."""
    milli = 0
    given = set()  # roles counted by what their tasks hold
    latest = max(attempts, key=lambda a: a.number) if attempts else None
    for name, role in spec.get("taskRoles", {}).items():
        if role.get("nodes") is not None:
            given.add(name)
            continue
        low, high = instance_span(role)
        live = [t for t in latest.tasks if t.role == name and not TaskState(t.state).is_final and not t.removed] \
            if latest is not None and high > low else []
        if live:
            milli += sum(share[1] for t in live for share in t.gpus)
            continue
        gpu = (role.get("resourcePerInstance") or {}).get("gpu") or 0
        milli += round(float(gpu) * 1000) * low
    if given and latest is not None:
        milli += sum(share[1] for task in latest.tasks if task.role in given for share in task.gpus)
    return from_milli(milli)


def job_summary(row: JobRow, now: datetime) -> JobSummary:
    """The job's row as the list shows it; ``now`` counts a running attempt's time so far."""
    return JobSummary(
        id=row.id,
        name=row.name,
        user=row.user.name,
        vc=row.vc,
        priority=row.priority,
        state=JobState(row.state),
        attempt=row.attempt,
        submittedAt=row.submitted_at,
        startedAt=row.started_at,
        finishedAt=row.finished_at,
        exitCode=row.exit_code,
        pending=_pending(row),
        gpus=total_gpus(row.spec, () if row.state in QUEUED_JOB_STATES else row.attempts),
        message=row.state_message,
        runtimeSeconds=run_seconds(((a.started_at, a.finished_at) for a in row.attempts), now),
        heldBy=row.held_by,
        borrowed=runs_borrowed(row),
    )


def runs_borrowed(row: JobRow) -> bool:
    """Whether the job's current attempt holds borrowed GPUs (it runs, or is stopping)."""
    if row.state not in (JobState.RUNNING, JobState.STOPPING):
        return False
    return any(a.borrowed for a in row.attempts if a.number == row.attempt)


def submit_result(row: JobRow, user: str, warnings: list[str]) -> SubmitResult:
    return SubmitResult(
        id=row.id, name=row.name, user=user, vc=row.vc, priority=row.priority,
        state=JobState(row.state), submittedAt=row.submitted_at, warnings=warnings,
    )


def task_view(row: TaskRow) -> TaskView:
    return TaskView(
        role=row.role,
        index=row.index,
        state=TaskState(row.state),
        node=row.node,
        gpus=[g[0] for g in row.gpus],
        gpu=from_milli(sum(g[1] for g in row.gpus)),
        cpu=from_milli(row.cpu_milli),
        memoryMB=row.memory_mb,
        ports=row.ports,
        run=row.run,
        exitCode=row.exit_code,
        message=row.message,
        startedAt=row.started_at,
        finishedAt=row.finished_at,
    )


def _sizes(attempt: AttemptRow, role: str | None, events: list[JobEventRow]) -> list[SizeView]:
    """An elastic job's size over one attempt, from its ``resized`` events (their messages
    say the size before and after): the size it started at, then one entry per resize."""
    if role is None or attempt.started_at is None:
        return []
    end = attempt.finished_at
    changes = [(e.at, sizes) for e in events
               if e.kind == transitions.EventKind.RESIZED and attempt.started_at <= e.at
               and (end is None or e.at <= end) and (sizes := transitions.resize_of(e.message)) is not None]
    first = changes[0][1][0] if changes else sum(1 for t in attempt.tasks if t.role == role and not t.removed)
    return [SizeView(at=attempt.started_at, workers=first),
            *(SizeView(at=at, workers=after) for at, (_, after) in changes)]


def attempt_view(row: AttemptRow, sizes: list[SizeView] | None = None) -> AttemptView:
    return AttemptView(
        sizes=sizes or [],
        number=row.number,
        state=AttemptState(row.state),
        startedAt=row.started_at,
        finishedAt=row.finished_at,
        exitCode=row.exit_code,
        reason=row.reason,
        tasks=[task_view(t) for t in row.tasks],
        borrowed=row.borrowed,
    )


def job_detail(
    row: JobRow, events: list[JobEventRow], warnings: list[str], *, spec: JobSpec, now: datetime
) -> JobDetail:
    """The job in full; ``spec`` is its stored job file, parsed (``services.specs``)."""
    summary = job_summary(row, now)
    return JobDetail(
        **summary.model_dump(),
        retriesUsed=row.retries_used,
        platformRetriesUsed=platform_retries_used(a.state for a in row.attempts),
        gracePeriodSeconds=row.grace_seconds,
        spec=masked_spec(spec),
        attempts=[attempt_view(a, _sizes(a, spec.elastic_role, events)) for a in row.attempts],
        events=[EventView(at=e.at, kind=e.kind, message=e.message) for e in events],
        warnings=warnings,
    )


def _gpu_usage(sampled: dict[str, Any] | None) -> GpuUsageView | None:
    if sampled is None:
        return None
    return GpuUsageView(
        utilPct=None if sampled.get("simulated") else sampled.get("util_pct"),
        memoryUsedMB=sampled.get("memory_used_mb"),
        temperatureC=sampled.get("temperature_c"),
        powerW=sampled.get("power_w"),
        eccErrors=sampled.get("ecc_errors"),
        healthy=bool(sampled.get("healthy", True)),
    )


def _node_usage(sample: NodeLatestRow | None) -> NodeUsageView | None:
    if sample is None:
        return None
    return NodeUsageView(
        sampledAt=sample.at, cpuPct=sample.cpu_pct, load1=sample.load1, memoryUsedMB=sample.memory_used_mb,
        memoryTotalMB=sample.memory_total_mb, diskUsedPct=sample.disk_used_pct,
    )


def node_view(
    row: NodeRow, tasks: list[TaskRow], visible_jobs: set[int] | None = None, sample: NodeLatestRow | None = None
) -> NodeView:
    """The node with what its tasks hold; ``visible_jobs`` (None: all) limits which job ids it
    names, so that a non-admin sees which GPUs are used but not by whose jobs. ``sample`` is
    the node's newest fresh sample, if any: what it measured sits beside what is allocated
    (a GPU the sample does not list was not measured, and has no usage)."""
    on_node = [t for t in tasks if t.node == row.name]
    sampled_gpus = {g["index"]: g for g in sample.gpu_dicts()} if sample is not None else {}
    held: dict[int, list[tuple[int, int]]] = {}  # GPU index -> (job, milli-GPUs), each task read once
    for task in on_node:
        for index, milli in task.gpus:
            held.setdefault(index, []).append((task.job_id, milli))
    gpus = []
    for gpu in row.gpus:
        holders = held.get(gpu["index"], [])
        gpus.append(
            GpuView(
                index=gpu["index"],
                model=gpu["model"],
                memoryMB=gpu["memory_mb"],
                simulated=gpu.get("simulated", False),
                used=sum(m for _, m in holders) / 1000,
                jobs=sorted({j for j, _ in holders if visible_jobs is None or j in visible_jobs}),
                usage=_gpu_usage(sampled_gpus.get(gpu["index"])),
            )
        )
    return NodeView(
        name=row.name,
        backend=row.backend,
        address=row.address,
        schedulable=row.schedulable and not row.cordoned,
        cpu=from_milli(row.cpu_milli),
        cpuUsed=from_milli(sum(t.cpu_milli for t in on_node)),
        memoryMB=row.memory_mb,
        memoryUsedMB=sum(t.memory_mb for t in on_node),
        gpus=gpus,
        simulated=any(g.get("simulated", False) for g in row.gpus),
        cordoned=row.cordoned,
        labels=merged_labels(row.labels, row.admin_labels),
        adminLabels=dict(row.admin_labels or {}),
        usage=_node_usage(sample),
    )


def user_view(row: UserRow) -> UserView:
    return UserView(name=row.name, admin=row.is_admin, createdAt=row.created_at, disabled=row.disabled,
                    hasPassword=row.password_hash is not None)


def token_view(row: TokenRow) -> TokenView:
    return TokenView(id=row.id, user=row.user.name, name=row.name, prefix=row.prefix, createdAt=row.created_at,
                     lastUsedAt=row.last_used_at)


def group_view(row: GroupRow, members: list[str]) -> GroupView:
    return GroupView(name=row.name, members=members)


def user_quota_view(user: str, priority: str, milli_gpus: int) -> UserQuotaView:
    return UserQuotaView(user=user, priority=priority, gpus=milli_gpus / 1000)


def _total(values: list[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return sum(measured) if measured else None


def job_usage_view(job: JobRow, tasks: list[TaskRow], samples: list[TaskLatestRow], now: datetime) -> JobUsageView:
    """A running job's live figures: its tasks' newest fresh ``samples`` summed; GPU
    utilisation is the mean over the GPUs the sampled tasks hold, weighted by their share."""
    util = [(s.gpu_util_pct, s.gpus_held) for s in samples if s.gpu_util_pct is not None and s.gpus_held > 0]
    held = sum(h for _, h in util)
    started = [t.started_at for t in tasks if t.started_at is not None]
    gpu_memory = _total([s.gpu_memory_mb for s in samples])
    memory = _total([s.memory_mb for s in samples])
    return JobUsageView(
        id=job.id, name=job.name, user=job.user.name, vc=job.vc, state=JobState(job.state),
        gpus=from_milli(sum(g[1] for t in tasks for g in t.gpus)), tasks=len(tasks), tasksSampled=len(samples),
        gpuUtilPct=sum(u * h for u, h in util) / held if held else None,
        gpuMemoryMB=None if gpu_memory is None else int(gpu_memory),
        cpuCores=_total([s.cpu_cores for s in samples]),
        memoryMB=None if memory is None else int(memory),
        runtimeSeconds=(now - min(started)).total_seconds() if started else None,
        sampledAt=max((s.at for s in samples), default=None),
    )
