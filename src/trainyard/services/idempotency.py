"""Idempotent submits: the ``Idempotency-Key`` header of ``POST /jobs`` and ``POST
/jobs/{id}/clone`` (the IETF HTTP draft draft-ietf-httpapi-idempotency-key-header).

A client whose connection dropped after it sent a submit cannot know whether the job was
made. With a key, it sends the same request again with the same key, and:

1. the first request that makes a job stores, in the same transaction as the job, the key
   (per user), a fingerprint of the request, the job's id and the answer it gives (201 and
   its body);
2. a request with a key already stored for that user, and the same fingerprint, gets that
   first answer again, status and body as they were (as Stripe does; the draft says
   "the result of the previously completed operation"), marked ``Idempotent-Replayed:
   true``, and makes nothing;
3. the same key with another request (another body, path, media type or clone parameter)
   is refused with 422, as the draft says, naming the job the key made;
4. two requests with one key at the same moment: both may pass step 2, both make a job, but
   only one key row can be stored (a unique constraint on user and key): the other's
   transaction fails as a whole, its job with it, and it answers as step 2 does.

A refused submit (a 4xx) stores nothing: sending it again runs its checks again, as
Stripe does for a request that failed validation. A dry run makes nothing and ignores the
key. Keys are forgotten ``keep`` after their first use (``idempotency_key_hours``, 24 h
by default): a retry after that makes a new job.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainyard.services.errors import Invalid
from trainyard.store.db import Database
from trainyard.store.queries import idempotency as key_queries
from trainyard.store.rows import IdempotencyKeyRow, UserRow

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"  # Stripe's name for "this answer is the first one, again"
MAX_KEY = 255
DEFAULT_KEEP_HOURS = 24.0
# Printable ASCII but the double quote and backslash (the draft's sf-string, unquoted), as
# a UUID or any client's random string is.
_KEY = re.compile(rf"[\x20\x21\x23-\x5b\x5d-\x7e]{{1,{MAX_KEY}}}")


@dataclass(frozen=True)
class Answer:
    """What a submit answers: its status and JSON body; ``replayed`` when it is the first
    answer to its key, given again."""

    status: int
    body: str
    job_id: int
    replayed: bool = False


def parse_key(header: str | None) -> str | None:
    """The key an ``Idempotency-Key`` header names (None without one). The draft writes it as
    a Structured Field string, ``"8e03…"``; a bare value (as Stripe takes it) is the same key."""
    if header is None:
        return None
    value = header.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not _KEY.fullmatch(value) or not value.strip():
        message = (f"the {HEADER} header must be 1 to {MAX_KEY} printable ASCII characters, without '\"' or "
                   "'\\', e.g. a UUID; send a new one for each job, and the same one to retry a submit")
        raise Invalid(message, details=[{"path": HEADER, "message": message}])
    return value


def fingerprint(method: str, path: str, media_type: str, parameters: Mapping[str, str | None], body: bytes) -> str:
    """What makes two requests the same request: SHA-256 of method, path, the parameters that
    change what is made, the body's media type and the body itself."""
    head = json.dumps([method.upper(), path, media_type, sorted((k, v) for k, v in parameters.items())])
    return hashlib.sha256(head.encode() + b"\n" + body).hexdigest()


def first_answer(session: Session, user: UserRow, key: str, print_: str, *, now: datetime,
                 keep: timedelta) -> Answer | None:
    """The answer the first request with this key got, if it is still kept (steps 2 and 3);
    a key kept no longer is removed, so that it may be used anew."""
    row = key_queries.stored_key(session, user.id, key)
    if row is None:
        return None
    if row.created_at <= now - keep:
        session.delete(row)
        session.flush()
        return None
    if row.fingerprint != print_:
        message = (f"this {HEADER} was used for another request (it made job {row.job_id}); a retry must send "
                   "the same request, and a new job a new key")
        raise Invalid(message, details=[{"path": HEADER, "message": message}])
    return Answer(row.status, row.response, row.job_id, replayed=True)


def earlier_answer(db: Database, user: UserRow, key: str, print_: str, *, now: datetime,
                   keep: timedelta) -> Answer | None:
    """`first_answer` in a transaction of its own: asked before a request is even parsed, so
    that a retry gets the first answer whatever the checks would say of it today."""
    with db.session() as session:
        return first_answer(session, user, key, print_, now=now, keep=keep)


def forget_old_keys(session: Session, *, now: datetime, keep: timedelta) -> None:
    """Remove every key older than ``keep``: done as keyed submits come, so the table holds
    about one day's keyed submits."""
    key_queries.delete_keys_made_by(session, now - keep)


def submit_once(db: Database, user: UserRow, key: str | None, print_: str,
                submit: Callable[[Session], Answer], *, now: Callable[[], datetime], keep: timedelta) -> Answer:
    """``submit`` (which makes a job in the session it is given and says what to answer), made
    at most once per ``key`` of ``user``, as the module's steps say; without a key, once."""
    if key is None:
        with db.session() as session:
            return submit(session)
    try:
        with db.session() as session:
            found = first_answer(session, user, key, print_, now=now(), keep=keep)
            if found is not None:
                return found
            answer = submit(session)
            forget_old_keys(session, now=now(), keep=keep)
            session.add(IdempotencyKeyRow(user_id=user.id, key=key, fingerprint=print_, job_id=answer.job_id,
                                          status=answer.status, response=answer.body, created_at=now()))
            session.flush()  # the unique constraint speaks here, or at the commit
    except IntegrityError:
        # Step 4: another request with this key stored its job first; ours is rolled back.
        found = earlier_answer(db, user, key, print_, now=now(), keep=keep)
        if found is None:
            raise  # not the key's constraint: the app answers it as any conflicting write
        return found
    return answer
