"""The cluster as the scheduler sees it, read from the store for one cycle.

Nodes with what their unfinished tasks hold (``services.node_view``, which a submit's checks
share), the virtual clusters with their quotas, the per-user quotas, and the running work with its
expected end (from ``maxRunTimeSeconds``) and whether it is already being stopped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core.priorities import Priority
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GpuSharing
from trainyard.core.states import AttemptState, JobState
from trainyard.scheduler.snapshot import (
    GpuShare,
    RunningJob,
    TaskPlacement,
    VirtualCluster,
)
from trainyard.services import admin
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries


def virtual_clusters(session: Session) -> tuple[VirtualCluster, ...]:
    """The VCs with their quotas (see ``services.admin.guaranteed_quotas``), GPU sharing rules
    and borrowing settings (``services.admin.vc_borrowing``: ``default``'s too, which the admin
    sets like any VC's); none if none is defined (then every job is in ``default``, with the
    default rule, and nothing is borrowed: there is no one to borrow from)."""
    rows = vc_queries.all_vcs(session)
    if not rows:
        return ()
    sharing = {row.name: GpuSharing(row.gpu_sharing) for row in rows}
    borrowing = admin.vc_borrowing(session, rows)
    return tuple(
        VirtualCluster(
            name, quota, preemption, sharing.get(name, DEFAULT_GPU_SHARING),
            borrow_limit=borrowing[name].borrow_limit, lend_limit=borrowing[name].lend_limit,
            weight=borrowing[name].weight,
        )
        for name, (quota, preemption) in admin.guaranteed_quotas(session, rows=rows).items()
    )


def user_groups(session: Session) -> dict[str, frozenset[str]]:
    """User name -> the groups (ids, as text) the user is a member of, for ``same-group`` sharing."""
    groups: dict[str, set[str]] = defaultdict(set)
    for group_id, name in vc_queries.member_names(session):
        groups[name].add(str(group_id))
    return {name: frozenset(ids) for name, ids in groups.items()}


def user_quotas(session: Session) -> dict[tuple[str, int], int]:
    """(user, priority rank) -> milli-GPU the user may hold at that priority."""
    limits = user_queries.user_quotas_by_name(session)
    return {(user, Priority(priority).rank): milli for user, priority, milli in limits}


def held_ports(session: Session) -> dict[str, set[int]]:
    """Each node's ports that live tasks hold (theirs and their attempt's master port): the
    allocator hands none of them to another task until the task has ended."""
    held: dict[str, set[int]] = defaultdict(set)
    for node, ports, master in job_queries.live_task_ports(session):
        taken = held[node]
        taken.update(p for listed in (ports or {}).values() for p in listed)
        if master is not None:
            taken.add(master)
    return dict(held)


def running_jobs(session: Session) -> tuple[tuple[RunningJob, ...], frozenset[int]]:
    """Jobs holding resources, and which of them are already being stopped or preempted."""
    work = running_work(session)
    return work.running, work.ending


@dataclass(frozen=True)
class RunningWork:
    running: tuple[RunningJob, ...]
    ending: frozenset[int]  # already being stopped or preempted
    attempts: dict[int, int]  # job id -> the number of the attempt that holds its resources
    # Elastic jobs (``scheduler/elastic.py``), by id: the most workers of their elastic role,
    # and their workers leaving (told to by a shrink, still running).
    elastic: dict[int, int] = field(default_factory=dict)
    leaving: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)


def running_work(session: Session) -> RunningWork:
    """Jobs holding resources (each marked ``borrowed`` when its current attempt runs on
    borrowed GPUs), which of them are already being stopped or preempted, and their
    attempts' numbers (for fair share's tally of runs that end: ``controller.fairshare``)."""
    rows = job_queries.holding_tasks(session)
    tasks_of: dict[int, list[Sequence[Any]]] = defaultdict(list)  # job id -> its rows
    for row in rows:
        tasks_of[row[0]].append(row)
    running, ending, attempts = [], set(), {}
    elastic: dict[int, int] = {}
    leaving: dict[int, tuple[tuple[str, int], ...]] = {}
    for job_id, tasks in tasks_of.items():
        _, vc, user, priority, state, grace, limit, attempt_state, started, stop_requested, *rest = tasks[0]
        suspendable, attained, number, borrowed, elastic_max = rest[0], rest[1], rest[2], rest[3], rest[4]
        if elastic_max is not None:
            elastic[job_id] = elastic_max
            gone = tuple((role, index) for *_, removed, role, index, _node, _gpus, _cpu, _memory in tasks if removed)
            if gone:
                leaving[job_id] = gone
        if state == JobState.STOPPING or attempt_state != AttemptState.RUNNING:
            ending.add(job_id)
        attempts[job_id] = number
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
                suspendable=bool(suspendable),
                attained_service=attained,
                borrowed=bool(borrowed),
            )
        )
    return RunningWork(tuple(running), frozenset(ending), attempts, elastic, leaving)
