"""Users and bearer tokens: creation, who may issue a token for whom, bootstrap of the first
admin, authentication, and how long a verified token is trusted without asking the store."""

from __future__ import annotations

import hashlib
import secrets
import time

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.names import USER_NAME
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.store.db import Database
from trainyard.store.queries import users
from trainyard.store.rows import TokenRow, UserRow

TOKEN_PREFIX = "ty_"
# How long a verified token is trusted without asking the store again. Tokens cannot be
# revoked yet; when they can, revocation must also clear the `TokenCache`.
TOKEN_CACHE_SECONDS = 10.0
TOKEN_CACHE_MAX = 10_000


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


def issue_token(
    session: Session, caller: UserRow, *, for_user: str | None, name: str = "", clock: Clock
) -> tuple[str, UserRow]:
    """A new token for ``for_user`` (default: the caller) and its owner.

    Only an admin may ask for another user's token; anyone else is refused before the name
    is looked up, so that the answer does not tell whether that user exists.
    """
    if for_user and for_user != caller.name and not caller.is_admin:
        raise Forbidden("only an admin may create tokens for another user")
    owner = get_user(session, for_user) if for_user else session.merge(caller)
    return create_token(session, owner, by=caller, name=name, clock=clock), owner


def authenticate(session: Session, token: str) -> UserRow | None:
    row = users.live_token(session, hash_token(token))
    return row.user if row is not None else None


def bootstrap_admin(session: Session, *, clock: Clock) -> str | None:
    """On an empty store, create the ``admin`` user and return a token for it."""
    if users.count_users(session):
        return None
    admin = create_user(session, "admin", is_admin=True, clock=clock)
    return create_token(session, admin, by=admin, name="local client file", clock=clock)


class TokenCache:
    """Who a token belongs to, asked of the store at most once per ``TOKEN_CACHE_SECONDS``
    per token: every request carries one, and the answer rarely changes."""

    def __init__(self, db: Database, *, seconds: float = TOKEN_CACHE_SECONDS) -> None:
        self._db = db
        self._seconds = seconds
        self._users: dict[str, tuple[float, UserRow]] = {}

    def user_for_token(self, token: str) -> UserRow | None:
        digest = hash_token(token)
        now = time.monotonic()
        cached = self._users.get(digest)
        if cached is not None and now - cached[0] < self._seconds:
            return cached[1]
        with self._db.session() as session:
            user = authenticate(session, token)
        if user is not None:
            if len(self._users) > TOKEN_CACHE_MAX:
                self._users.clear()
            self._users[digest] = (now, user)
        return user
