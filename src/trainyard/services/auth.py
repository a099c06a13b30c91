"""Users and bearer tokens: creation, who may issue a token for whom, bootstrap of the first
admin, authentication, and how long a verified token is trusted without asking the store."""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterable

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock, SystemClock
from trainyard.core.names import USER_NAME
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.store.db import Database
from trainyard.store.queries import users
from trainyard.store.rows import TokenRow, UserRow

TOKEN_PREFIX = "ty_"
# How long a verified token is trusted without asking the store again: the longest a token
# revoked (or a user disabled or deleted) elsewhere than through this server's own
# `TokenCache` is still accepted. The server that revokes forgets the token at once.
TOKEN_CACHE_SECONDS = 3.0  # the docs promise 3 s for a revocation to reach everything
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
    existing = users.user_named(session, name)
    if existing is not None and existing.deleted_at is not None:
        raise Conflict(f"user {name!r} was deleted, and a deleted user's name stays with their job history: "
                       "choose another name")
    if existing is not None:
        raise Conflict(f"user {name!r} already exists")
    user = UserRow(name=name, is_admin=is_admin, created_at=clock.now())
    session.add(user)
    session.flush()
    return user


def get_user(session: Session, name: str) -> UserRow:
    """The user of this name; a deleted one is not found."""
    user = users.user_named(session, name)
    if user is None or user.deleted_at is not None:
        deleted = " (deleted)" if user is not None else ""
        raise NotFound(f"no user named {name!r}{deleted}; see `yard user list`")
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


def authenticate(session: Session, token: str, *, clock: Clock | None = None) -> UserRow | None:
    """The token's user, or None for an unknown or revoked token (a deleted user's are all
    revoked). A *disabled* user is returned: the caller refuses them, saying why. With a
    ``clock``, the token's last use is noted."""
    row = users.live_token(session, hash_token(token))
    if row is None or row.user.deleted_at is not None:
        return None
    if clock is not None:
        row.last_used_at = clock.now()
    return row.user


# -- listing and revoking tokens ----------------------------------------------------------


def list_tokens(session: Session, caller: UserRow, *, for_user: str | None = None,
                every_user: bool = False) -> list[TokenRow]:
    """Live tokens of ``for_user`` (default: the caller), or of every user; others' are for
    admins only, refused before the name is looked up (as in `issue_token`)."""
    if (every_user or (for_user and for_user != caller.name)) and not caller.is_admin:
        raise Forbidden("only an admin may list another user's tokens")
    if every_user:
        return users.live_tokens(session)
    owner = get_user(session, for_user) if for_user else caller
    return users.live_tokens(session, owner.id)


def revoke_token(session: Session, caller: UserRow, token_id: int) -> TokenRow:
    """Revoke a live token of the caller's (any user's, for an admin), and end the browser
    sessions signed in with it.

    Refused when it is the last live token of every enabled admin: no one could administer
    the cluster any more. Another user's token is reported as not found, as their jobs are.
    """
    token = users.live_token_by_id(session, token_id)
    if token is None or (token.user_id != caller.id and not caller.is_admin):
        raise NotFound(f"no token {token_id}; `yard token list` shows the ids of the tokens you may revoke")
    signing_in = users.admins_signing_in(session)
    if signing_in and all(tid == token.id for _, tid in signing_in):
        raise Conflict(
            f"token {token_id} is the last token of any admin: revoking it would leave no one able to "
            "administer Trainyard; create another first (`yard token create`)",
            details=[{"path": "token_id", "message": "the last admin token"}],
        )
    token.revoked = True
    users.revoke_web_sessions_of_token(session, token.id)  # what signed in with it goes with it
    return token


def bootstrap_admin(session: Session, *, clock: Clock) -> str | None:
    """On an empty store, create the ``admin`` user and return a token for it."""
    if users.count_users(session):
        return None
    admin = create_user(session, "admin", is_admin=True, clock=clock)
    return create_token(session, admin, by=admin, name="local client file", clock=clock)


class TokenCache:
    """Who a token belongs to, asked of the store at most once per ``TOKEN_CACHE_SECONDS``
    per token: every request carries one, and the answer rarely changes. Each time it does
    ask, the token's last use is written.

    A revocation, or a user disabled or deleted, through this server is `forget`-ten at
    once; one made elsewhere (another server process on the same store) takes effect here
    within ``TOKEN_CACHE_SECONDS``.
    """

    def __init__(self, db: Database, *, clock: Clock | None = None, seconds: float = TOKEN_CACHE_SECONDS) -> None:
        self._db = db
        self._clock = clock or SystemClock()
        self._seconds = seconds
        self._lock = threading.Lock()  # requests authenticate on a thread pool
        self._users: dict[str, tuple[float, UserRow]] = {}  # token hash -> (checked at, user)
        # Bumped by every `forget`: an answer the store gave before a forget (a request that
        # read the token as the revocation committed) is not kept past it.
        self._generation = 0

    def known(self, token: str) -> UserRow | None:
        """Whose ``token`` is, if this cache knows it and it has not expired; else None (ask
        ``user_for_token``). It never waits for the store: the API asks it first, on the
        event loop, and hands only a miss to a thread."""
        with self._lock:
            cached = self._users.get(hash_token(token))
        if cached is not None and self._clock.monotonic() - cached[0] < self._seconds:
            return cached[1]
        return None

    def user_for_token(self, token: str) -> UserRow | None:
        digest = hash_token(token)
        now = self._clock.monotonic()
        with self._lock:
            cached = self._users.get(digest)
            generation = self._generation
        if cached is not None and now - cached[0] < self._seconds:
            return cached[1]
        with self._db.session() as session:
            user = authenticate(session, token, clock=self._clock)
        with self._lock:
            if user is None:
                self._users.pop(digest, None)
                return None
            if generation != self._generation:
                return user  # this request may go on with it; the next one asks again
            if len(self._users) > TOKEN_CACHE_MAX:
                self._users.clear()
            self._users[digest] = (now, user)
        return user

    def forget(self, *, user_ids: Iterable[int] = ()) -> None:
        """Ask the store again about every token of these users, from the next request on."""
        gone = set(user_ids)
        with self._lock:
            self._generation += 1
            self._users = {digest: entry for digest, entry in self._users.items() if entry[1].id not in gone}
