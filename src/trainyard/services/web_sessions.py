"""Signed-in browsers: sessions started with a password or a token, looked up per request,
ended by signing out, by expiry, when the token they signed in with is revoked, when the
user's password changes, and when the user is disabled or deleted (for good: enabling the
user again does not bring them back).

The cookie holds a 256-bit random value and the store its SHA-256, as for tokens; each
session has its own secret that every state-changing form or request must carry (the
synchronizer-token defence against cross-site request forgery).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.names import USER_NAME
from trainyard.services import passwords
from trainyard.services.auth import hash_token
from trainyard.services.passwords import check_sign_in, verify_password
from trainyard.services.sign_in_limits import sign_in_name
from trainyard.store.db import Database
from trainyard.store.queries import users
from trainyard.store.rows import UserRow, WebSessionRow

IDLE_SECONDS = 12 * 3600  # signed out after this long without a request
LIFETIME_SECONDS = 7 * 86400  # and after this long whatever happens


@dataclass(frozen=True)
class SignedIn:
    cookie: str  # what the browser keeps; only its hash is stored
    csrf_token: str
    user: UserRow


def sign_in_with_password(db: Database, name: str, password: str, *, clock: Clock) -> SignedIn | None:
    """A new session for a right name and password; None otherwise (a disabled user too,
    without saying which part was wrong). The password is checked between two short
    transactions, not inside one: scrypt takes ~0.1 s, a failed try as long as a good one."""
    name = sign_in_name(name)
    with db.session() as session:  # a name no user can have is not looked up (a NUL would be a 500)
        user = users.user_named(session, name) if USER_NAME.fullmatch(name) else None
    if not check_sign_in(user, password) or user is None or user.disabled:
        return None
    with db.session() as session:
        return _start(session, user, "password", clock)


def sign_in_with_token(session: Session, token: str, *, clock: Clock) -> SignedIn | None:
    row = users.live_token(session, hash_token(token.strip()))
    if row is None or row.user.deleted_at is not None or row.user.disabled:
        return None
    row.last_used_at = clock.now()
    return _start(session, row.user, "token", clock, token_id=row.id)


def _start(session: Session, user: UserRow, method: str, clock: Clock, token_id: int | None = None) -> SignedIn:
    cookie = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    now = clock.now()
    session.add(WebSessionRow(user_id=user.id, token_hash=hash_token(cookie), csrf_token=csrf, created_at=now,
                              last_seen_at=now, expires_at=now + timedelta(seconds=LIFETIME_SECONDS),
                              method=method, revoked=False, token_id=token_id))
    session.flush()
    return SignedIn(cookie, csrf, user)


def session_for_cookie(session: Session, cookie: str, *, clock: Clock) -> WebSessionRow | None:
    """The live session this cookie belongs to, its last use noted; None when the cookie is
    unknown, signed out, expired, idle too long, signed in with a token since revoked, or
    its user disabled or deleted."""
    if not cookie:
        return None
    return session_for_hash(session, hash_token(cookie), clock=clock)


def session_for_hash(session: Session, cookie_hash: str, *, clock: Clock) -> WebSessionRow | None:
    """``session_for_cookie`` by the cookie's SHA-256 (what open connections keep)."""
    row = users.unrevoked_web_session(session, cookie_hash)
    now = clock.now()
    if row is None or row.expires_at <= now or now - row.last_seen_at > timedelta(seconds=IDLE_SECONDS):
        return None
    if row.user.disabled or row.user.deleted_at is not None:
        return None
    if now - row.last_seen_at > timedelta(seconds=60):  # written at most once a minute
        row.last_seen_at = now
    return row


def csrf_matches(row: WebSessionRow, offered: str | None) -> bool:
    return bool(offered) and hmac.compare_digest(row.csrf_token.encode(), (offered or "").encode())


def sign_out(session: Session, cookie: str) -> None:
    row = users.web_session_with_hash(session, hash_token(cookie))
    if row is not None:
        row.revoked = True


def sign_out_everywhere(session: Session, user_id: int, *, keep: int | None = None) -> int:
    """End every session of a user (their password changed, they were disabled or deleted)
    but ``keep`` (the session that changed it); how many. For good: nothing revives them."""
    ended = [row for row in users.unrevoked_web_sessions_of(session, user_id) if row.id != keep]
    for row in ended:
        row.revoked = True
    return len(ended)


def change_password(session: Session, caller: UserRow, name: str | None, new: str, *, current: str | None = None,
                    keep: WebSessionRow | None = None) -> UserRow:
    """Set a password as `passwords.set_password` allows, and end the user's other browser
    sessions: whoever knew the old password (or stole a session) is signed out."""
    target = passwords.set_password(session, caller, name, new, current=current)
    sign_out_everywhere(session, target.id, keep=keep.id if keep is not None else None)
    return target


def clear_password(session: Session, caller: UserRow, name: str) -> UserRow:
    """Remove a password (admin) and end the user's browser sessions: they sign in with a
    token from now on."""
    target = passwords.clear_password(session, caller, name)
    sign_out_everywhere(session, target.id)
    return target


def reauthenticated(session: Session, user: UserRow, secret: str) -> bool:
    """Whether ``secret`` is ``user``'s password, or else a live token of theirs: what a
    browser session must give again before it makes a new credential (a token), so that a
    stolen session cannot make itself one that outlives it."""
    if not secret:
        return False
    current = users.user_by_id(session, user.id)
    if current is None or current.disabled or current.deleted_at is not None:
        return False
    if current.password_hash is not None and verify_password(secret, current.password_hash):
        return True
    token = users.live_token(session, hash_token(secret.strip()))
    return token is not None and token.user_id == current.id


def signed_in(db: Database, cookie: str, *, clock: Clock) -> WebSessionRow | None:
    """``session_for_cookie`` in a unit of work of its own (the last use noted as it commits),
    with its user: who a browser is, asked once per request by the portal's pages and by the
    routes that take a cookie as well as a token."""
    with db.session() as session:
        return session_for_cookie(session, cookie, clock=clock)


def live_credentials(db: Database, token_hashes: set[str], cookie_hashes: set[str], *, clock: Clock) -> set[str]:
    """Which of these credentials (by their SHA-256) still let their holder in: tokens not
    revoked, of enabled users; browsers signed in and not idle past ``IDLE_SECONDS``, as
    ``"token:<hash>"`` and ``"cookie:<hash>"`` (``web/revocation.py`` ends the others'
    connections)."""
    with db.session() as session:
        live = {"token:" + digest for digest in users.live_token_hashes(session, token_hashes)}
        live |= {"cookie:" + digest for digest in users.live_web_session_hashes(
            session, cookie_hashes, now=clock.now(), idle_seconds=IDLE_SECONDS)}
    return live

