"""Queries about users, their tokens, their signed-in browsers and their per-priority GPU limits."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from trainyard.store.rows import TokenRow, UserQuotaRow, UserRow, WebSessionRow


def user_named(session: Session, name: str) -> UserRow | None:
    """The user of this name, deleted or not."""
    return session.scalar(select(UserRow).where(UserRow.name == name))


def user_by_id(session: Session, user_id: int) -> UserRow | None:
    """The user with this id, deleted or not."""
    return session.get(UserRow, user_id)


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
    """Revoke every live token of a user, and end the browser sessions signed in with them;
    their ids."""
    tokens = live_tokens(session, user_id)
    for token in tokens:
        token.revoked = True
        revoke_web_sessions_of_token(session, token.id)
    return [t.id for t in tokens]


def revoke_web_sessions_of_token(session: Session, token_id: int) -> int:
    """End every browser session signed in with this token; how many."""
    ended = session.execute(update(WebSessionRow)
                            .where(WebSessionRow.token_id == token_id, WebSessionRow.revoked.is_(False))
                            .values(revoked=True).execution_options(synchronize_session=False))
    return int(ended.rowcount)  # type: ignore[attr-defined]


def web_session_with_hash(session: Session, cookie_hash: str) -> WebSessionRow | None:
    """The browser session whose cookie has this hash, signed out or not."""
    return session.scalar(select(WebSessionRow).where(WebSessionRow.token_hash == cookie_hash))


def unrevoked_web_session(session: Session, cookie_hash: str) -> WebSessionRow | None:
    """The browser session whose cookie has this hash, unless it was signed out or the
    token it signed in with was revoked (its expiry and idleness are the caller's rule)."""
    return session.scalar(
        select(WebSessionRow)
        .outerjoin(TokenRow, TokenRow.id == WebSessionRow.token_id)
        .where(WebSessionRow.token_hash == cookie_hash, WebSessionRow.revoked.is_(False),
               WebSessionRow.token_id.is_(None) | TokenRow.revoked.is_(False)))


def unrevoked_web_sessions_of(session: Session, user_id: int) -> list[WebSessionRow]:
    """Every browser session of a user not signed out."""
    return list(session.scalars(select(WebSessionRow).where(WebSessionRow.user_id == user_id,
                                                            WebSessionRow.revoked.is_(False))))


CHUNK = 500  # hashes per IN (...)


def live_token_hashes(session: Session, hashes: set[str]) -> set[str]:
    """Which of these token hashes are of live tokens of users neither disabled nor deleted."""
    found: set[str] = set()
    wanted = sorted(hashes)
    for start in range(0, len(wanted), CHUNK):
        found.update(session.scalars(
            select(TokenRow.token_hash).join(UserRow, UserRow.id == TokenRow.user_id)
            .where(TokenRow.token_hash.in_(wanted[start:start + CHUNK]), TokenRow.revoked.is_(False),
                   UserRow.disabled.is_(False), UserRow.deleted_at.is_(None))))
    return found


def live_web_session_hashes(session: Session, hashes: set[str], *, now: datetime,
                            idle_seconds: float, seen_every_seconds: float = 60.0) -> set[str]:
    """Which of these cookie hashes are of live browser sessions (``web_sessions.
    session_for_hash``'s rule: not signed out, expired or idle, their token if any not
    revoked, their user neither disabled nor deleted); their last use is noted, an open
    connection being a use."""
    found: set[str] = set()
    wanted = sorted(hashes)
    for start in range(0, len(wanted), CHUNK):
        rows = session.scalars(
            select(WebSessionRow).join(UserRow, UserRow.id == WebSessionRow.user_id)
            .outerjoin(TokenRow, TokenRow.id == WebSessionRow.token_id)
            .where(WebSessionRow.token_hash.in_(wanted[start:start + CHUNK]), WebSessionRow.revoked.is_(False),
                   WebSessionRow.token_id.is_(None) | TokenRow.revoked.is_(False),
                   UserRow.disabled.is_(False), UserRow.deleted_at.is_(None),
                   WebSessionRow.expires_at > now,
                   WebSessionRow.last_seen_at >= now - timedelta(seconds=idle_seconds)))
        for row in rows:
            found.add(row.token_hash)
            if now - row.last_seen_at > timedelta(seconds=seen_every_seconds):
                row.last_seen_at = now
    return found


def user_quota(session: Session, user_id: int, priority: str) -> UserQuotaRow | None:
    return session.get(UserQuotaRow, (user_id, priority))


def quota_millis(session: Session, user_ids: Collection[int]) -> dict[tuple[int, str], int]:
    """(user id, priority) -> the most milli-GPU that user may hold at that priority, for
    every limit set on any of ``user_ids``, in one statement."""
    if not user_ids:
        return {}
    query = select(UserQuotaRow.user_id, UserQuotaRow.priority, UserQuotaRow.gpu_milli).where(
        UserQuotaRow.user_id.in_(sorted(set(user_ids))))
    return {(user_id, priority): milli for user_id, priority, milli in session.execute(query).tuples()}


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
