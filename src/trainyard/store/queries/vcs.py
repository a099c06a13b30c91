"""Queries about virtual clusters, their quotas and grants, and groups with their members."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.core.states import TaskState
from trainyard.store.queries.decoded import as_text, gpu_shares
from trainyard.store.queries.jobs import queued
from trainyard.store.rows import (
    AttemptRow,
    GroupRow,
    JobRow,
    MembershipRow,
    TaskRow,
    UserRow,
    VcGrantRow,
    VcQuotaRow,
    VirtualClusterRow,
)


def vc_named(session: Session, name: str) -> VirtualClusterRow | None:
    return session.scalar(select(VirtualClusterRow).where(VirtualClusterRow.name == name))


def all_vcs(session: Session) -> list[VirtualClusterRow]:
    """Every defined VC (``default`` is not stored), by name."""
    return list(session.scalars(select(VirtualClusterRow).order_by(VirtualClusterRow.name)))


def vc_quota(session: Session, vc_id: int, gpu_model: str) -> VcQuotaRow | None:
    return session.get(VcQuotaRow, (vc_id, gpu_model))


def all_vc_quotas(session: Session) -> list[VcQuotaRow]:
    return list(session.scalars(select(VcQuotaRow)))


class HeldShares(NamedTuple):
    """What one unfinished task holds, and whose it is."""

    node: str
    vc: str
    priority: str
    gpus: tuple[tuple[int, int], ...]  # (device index, milli) of each share, as ``TaskRow.gpus``
    borrowed: bool = False  # its attempt runs on borrowed GPUs (``AttemptRow.borrowed``)


def held_gpu_shares(session: Session) -> list[HeldShares]:
    """(node, VC, priority, GPU shares, borrowed) of every unfinished task: one read serves
    both what nodes have allocated and what VCs use (``GET /metrics`` needs both). Shares come
    as tuples decoded once per distinct stored list (``decoded``), not as fresh lists."""
    query = (
        select(TaskRow.node, JobRow.vc, JobRow.priority, as_text(TaskRow.gpus), AttemptRow.borrowed)
        .join(TaskRow, TaskRow.job_id == JobRow.id)
        .join(AttemptRow, AttemptRow.id == TaskRow.attempt_id)
        .where(TaskRow.state.in_([TaskState.WAITING, TaskState.RUNNING]))
    )
    return [
        HeldShares(node, vc, priority, gpu_shares(gpus), bool(borrowed))
        for node, vc, priority, gpus, borrowed in session.execute(query)
    ]


def waiting_jobs_by_vc(session: Session) -> dict[str, int]:
    query = select(JobRow.vc, func.count()).where(queued()).group_by(JobRow.vc)
    return {vc: count for vc, count in session.execute(query)}


def group_named(session: Session, name: str) -> GroupRow | None:
    return session.scalar(select(GroupRow).where(GroupRow.name == name))


def all_groups(session: Session) -> list[GroupRow]:
    """Every group, by name."""
    return list(session.scalars(select(GroupRow).order_by(GroupRow.name)))


def membership(session: Session, group_id: int, user_id: int) -> MembershipRow | None:
    return session.get(MembershipRow, (group_id, user_id))


def memberships_of(session: Session, user_id: int) -> list[MembershipRow]:
    return list(session.scalars(select(MembershipRow).where(MembershipRow.user_id == user_id)))


def grants_to_user(session: Session, user_id: int) -> list[VcGrantRow]:
    """The user's own grants (not those through a group)."""
    return list(session.scalars(select(VcGrantRow).where(VcGrantRow.user_id == user_id)))


def member_names(session: Session) -> list[tuple[int, str]]:
    """(group id, user name) of every membership."""
    query = select(MembershipRow.group_id, UserRow.name).join(UserRow, UserRow.id == MembershipRow.user_id)
    return [(group_id, name) for group_id, name in session.execute(query)]


def group_ids_of(session: Session, user_id: int) -> set[int]:
    """The groups a user is a member of."""
    return set(session.scalars(select(MembershipRow.group_id).where(MembershipRow.user_id == user_id)))
