"""Queries of the limit on sign-in tries (``services.sign_in_limits``): each try is counted
by one ``UPDATE`` that also checks the limit, so that two tries at once never both read
the same count (PostgreSQL locks the row and checks the condition again; SQLite runs one
writer at a time)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, case, delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from trainyard.store.rows import SignInLimitRow, UTCDateTime


def count_try(session: Session, key: str, *, now: datetime, window_start_after: datetime, limit: int) -> bool:
    """Count one try for ``key`` and say True; or, when ``limit`` tries were counted since
    ``window_start_after`` (the window is still open), count nothing and say False. A
    window that has closed starts again at ``now``."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    session.execute(insert(SignInLimitRow).values(key=key, window_start=now, attempts=0)
                    .on_conflict_do_nothing(index_elements=["key"]))
    closed = SignInLimitRow.window_start <= window_start_after
    counted = session.execute(
        update(SignInLimitRow)
        .where(SignInLimitRow.key == key, closed | (SignInLimitRow.attempts < limit))
        .values(attempts=case((closed, 1), else_=SignInLimitRow.attempts + 1),
                window_start=case((closed, bindparam("now", now, type_=UTCDateTime())),
                                  else_=SignInLimitRow.window_start))
        .execution_options(synchronize_session=False)
    )
    return bool(counted.rowcount)  # type: ignore[attr-defined]


def window_started(session: Session, key: str) -> datetime | None:
    return session.scalar(select(SignInLimitRow.window_start).where(SignInLimitRow.key == key))


def uncount_try(session: Session, key: str) -> None:
    """Take back one counted try of ``key`` (it was not a failure)."""
    session.execute(update(SignInLimitRow).where(SignInLimitRow.key == key, SignInLimitRow.attempts > 0)
                    .values(attempts=SignInLimitRow.attempts - 1).execution_options(synchronize_session=False))


def clear_tries(session: Session, key: str) -> None:
    session.execute(delete(SignInLimitRow).where(SignInLimitRow.key == key)
                    .execution_options(synchronize_session=False))


def forget_closed_windows(session: Session, window_start_before: datetime) -> None:
    session.execute(delete(SignInLimitRow).where(SignInLimitRow.window_start < window_start_before)
                    .execution_options(synchronize_session=False))
