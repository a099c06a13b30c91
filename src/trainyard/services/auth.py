"""Users and bearer tokens: creation, bootstrap of the first admin, authentication."""

from __future__ import annotations

import hashlib
import re
import secrets

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.store.queries import users
from trainyard.store.rows import TokenRow, UserRow

TOKEN_PREFIX = "ty_"
USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,63}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(session: Session, name: str, *, is_admin: bool, clock: Clock) -> UserRow:
    if not USER_NAME.fullmatch(name):
        raise Invalid(
            f"user name {name!r} is not valid: use lowercase letters, digits, '_', '.', '-' "
            "(starting with a letter or '_'), at most 64 characters",
            details=[{"path": "name", "message": "invalid user name"}],
        )
    if users.user_named(session, name) is not None:
        raise Conflict(f"user {name!r} already exists")
    user = UserRow(name=name, is_admin=is_admin, created_at=clock.now())
    session.add(user)
    session.flush()
    return user


def get_user(session: Session, name: str) -> UserRow:
    user = users.user_named(session, name)
    if user is None:
        raise NotFound(f"no user named {name!r}")
    return user


def list_users(session: Session) -> list[UserRow]:
    return users.all_users(session)


def create_token(
    session: Session, owner: UserRow, *, by: UserRow, name: str = "", clock: Clock
) -> str:
    """Issue a new token for ``owner`` and return it; only its hash is kept."""
    if owner.id != by.id and not by.is_admin:
        raise Forbidden("only an admin may create tokens for another user")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        TokenRow(
            user_id=owner.id,
            name=name,
            token_hash=hash_token(token),
            prefix=token[:10],
            created_at=clock.now(),
        )
    )
    session.flush()
    return token


def authenticate(session: Session, token: str) -> UserRow | None:
    row = users.live_token(session, hash_token(token))
    return row.user if row is not None else None


def bootstrap_admin(session: Session, *, clock: Clock) -> str | None:
    """On an empty store, create the ``admin`` user and return a token for it."""
    if users.count_users(session):
        return None
    admin = create_user(session, "admin", is_admin=True, clock=clock)
    return create_token(session, admin, by=admin, name="local client file", clock=clock)
