"""Queries about users, their tokens and their per-priority GPU limits."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.store.rows import TokenRow, UserQuotaRow, UserRow


def user_named(session: Session, name: str) -> UserRow | None:
    """The user of this name, deleted or not."""
    return session.scalar(select(UserRow).where(UserRow.name == name))


def all_users(session: Session) -> list[UserRow]:
    """Every user not deleted, by name."""
    return list(session.scalars(select(UserRow).where(UserRow.deleted_at.is_(None)).order_by(UserRow.name)))


def count_users(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(UserRow)) or 0


def live_token(session: Session, token_hash: str) -> TokenRow | None:
    """The token with this hash, unless it was revoked."""
    return session.scalar(select(TokenRow).where(TokenRow.token_hash == token_hash, TokenRow.revoked.is_(False)))


def live_tokens(session: Session, user_id: int | None = None) -> list[TokenRow]:
    """Tokens not revoked, of one user or (``None``) of every user, oldest first."""
    query = select(TokenRow).where(TokenRow.revoked.is_(False)).order_by(TokenRow.id)
    if user_id is not None:
        query = query.where(TokenRow.user_id == user_id)
    return list(session.scalars(query))


def live_token_by_id(session: Session, token_id: int) -> TokenRow | None:
    return session.scalar(select(TokenRow).where(TokenRow.id == token_id, TokenRow.revoked.is_(False)))


def admins_signing_in(session: Session) -> list[tuple[int, int]]:
    """(user id, token id) of every live token of an enabled admin: who can still act as one."""
    query = (
        select(UserRow.id, TokenRow.id)
        .join(TokenRow, TokenRow.user_id == UserRow.id)
        .where(UserRow.is_admin.is_(True), UserRow.disabled.is_(False), UserRow.deleted_at.is_(None),
               TokenRow.revoked.is_(False))
    )
    return [(user_id, token_id) for user_id, token_id in session.execute(query)]


def revoke_tokens_of(session: Session, user_id: int) -> list[int]:
    """Revoke every live token of a user; their ids."""
    tokens = live_tokens(session, user_id)
    for token in tokens:
        token.revoked = True
    return [t.id for t in tokens]


def user_quota(session: Session, user_id: int, priority: str) -> UserQuotaRow | None:
    return session.get(UserQuotaRow, (user_id, priority))


def quotas_of(session: Session, user_id: int) -> list[UserQuotaRow]:
    return list(session.scalars(select(UserQuotaRow).where(UserQuotaRow.user_id == user_id)))


def user_quotas_by_name(session: Session) -> list[tuple[str, str, int]]:
    """(user name, priority, milli-GPU) for every per-user limit, by user then priority."""
    query = (
        select(UserRow.name, UserQuotaRow.priority, UserQuotaRow.gpu_milli)
        .join(UserRow, UserRow.id == UserQuotaRow.user_id)
        .order_by(UserRow.name, UserQuotaRow.priority)
    )
    return [(name, priority, milli) for name, priority, milli in session.execute(query)]
