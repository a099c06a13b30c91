"""Passwords for the portal's sign-in: scrypt hashes, and who may set whose (the limit on
sign-in tries is ``sign_in_limits``).

scrypt is memory-hard (RFC 7914) and in the standard library; the stored string carries
its parameters and salt (``scrypt$N$r$p$salt$hash``), so stronger parameters later still
verify old hashes. Tokens stay the way programs sign in; a password is only for people.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from sqlalchemy.orm import Session

from trainyard.services.auth import get_user
from trainyard.services.errors import Forbidden, Invalid
from trainyard.store.rows import UserRow

# N=2**15, r=8: 32 MiB and about 0.1 s per hash on one core, OWASP's scrypt floor or above.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
_MAXMEM = 64 << 20
MIN_LENGTH = 8
MAX_LENGTH = 1024  # hashing is bounded; a longer "password" is refused before it is hashed


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=_MAXMEM)
    return "$".join(("scrypt", str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)))


def verify_password(password: str, stored: str | None) -> bool:
    """Whether ``password`` matches ``stored``; False for no password or a malformed hash."""
    if not stored or len(password) > MAX_LENGTH:
        return False
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        want = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             maxmem=_MAXMEM, dklen=len(want))
    except ValueError:
        return False
    return hmac.compare_digest(got, want)


@functools.cache
def _dummy_hash() -> str:
    """Verifying against this when the user does not exist costs as much as a real check, so
    that the time a failed sign-in takes does not tell whether the name exists."""
    return hash_password(secrets.token_urlsafe(16))


def check_sign_in(user: UserRow | None, password: str) -> bool:
    if user is None or user.deleted_at is not None or user.password_hash is None:
        verify_password(password, _dummy_hash())
        return False
    return verify_password(password, user.password_hash)


def set_password(
    session: Session, caller: UserRow, name: str | None, new: str, *, current: str | None = None
) -> UserRow:
    """Set ``name``'s password (default: the caller's).

    A user changes their own, giving the current one if they have one; an admin sets or
    resets anyone's without it. Another user's name is refused to a non-admin before it is
    looked up, as tokens are.
    """
    if name and name != caller.name and not caller.is_admin:
        raise Forbidden("only an admin may set another user's password")
    target = get_user(session, name) if name else get_user(session, caller.name)
    if len(new) < MIN_LENGTH or len(new) > MAX_LENGTH:
        raise Invalid(f"a password has {MIN_LENGTH} to {MAX_LENGTH} characters",
                      details=[{"path": "password", "message": f"use {MIN_LENGTH} to {MAX_LENGTH} characters"}])
    resetting = caller.is_admin and target.id != caller.id
    if not resetting and target.password_hash is not None and not verify_password(current or "", target.password_hash):
        raise Forbidden("the current password is wrong",
                        details=[{"path": "current", "message": "give your current password"}])
    target.password_hash = hash_password(new)
    return target


def clear_password(session: Session, caller: UserRow, name: str) -> UserRow:
    """Remove a password (admin): the user signs in with a token only, until one is set."""
    if not caller.is_admin:
        raise Forbidden("only an admin may remove a password")
    target = get_user(session, name)
    target.password_hash = None
    return target


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
