"""Queries about users, their tokens and their per-priority GPU limits."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.store.rows import TokenRow, UserQuotaRow, UserRow


def user_named(session: Session, name: str) -> UserRow | None:
    return session.scalar(select(UserRow).where(UserRow.name == name))


def all_users(session: Session) -> list[UserRow]:
    """Every user, by name."""
    return list(session.scalars(select(UserRow).order_by(UserRow.name)))


def count_users(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(UserRow)) or 0


def live_token(session: Session, token_hash: str) -> TokenRow | None:
    """The token with this hash, unless it was revoked."""
    return session.scalar(select(TokenRow).where(TokenRow.token_hash == token_hash, TokenRow.revoked.is_(False)))


def user_quota(session: Session, user_id: int, priority: str) -> UserQuotaRow | None:
    return session.get(UserQuotaRow, (user_id, priority))


def user_quotas_by_name(session: Session) -> list[tuple[str, str, int]]:
    """(user name, priority, milli-GPU) for every per-user limit, by user then priority."""
    query = (
        select(UserRow.name, UserQuotaRow.priority, UserQuotaRow.gpu_milli)
        .join(UserRow, UserRow.id == UserQuotaRow.user_id)
        .order_by(UserRow.name, UserQuotaRow.priority)
    )
    return [(name, priority, milli) for name, priority, milli in session.execute(query)]
