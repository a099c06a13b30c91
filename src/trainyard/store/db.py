"""Engine and session setup for SQLite (default) and PostgreSQL, and schema migration."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_S = 30
# Pages of write-ahead log past which a commit copies the log into the database file
# itself (SQLite's own default is 1,000, about 4 MB). A server checkpoints from a thread of
# its own every WAL_CHECKPOINT_SECONDS (``Database.checkpoint_in_background``), so its
# commits do not reach this; other processes (tests, tools) still bound the log with it.
SQLITE_WAL_AUTOCHECKPOINT_PAGES = 10_000
WAL_CHECKPOINT_SECONDS = 1.0
# A transaction that holds the one writer longer than this is named in the debug log.
LONG_WRITE_SECONDS = 0.1

# Connections a server's engine keeps (and may open beyond them): see ``make_engine``.
POOL_SIZE, POOL_OVERFLOW = 10, 50

log = logging.getLogger(__name__)


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine tuned for Trainyard: SQLite in WAL mode with a busy timeout, its writers
    in this process queued in a lock (``_queue_writers``)."""
    if url.startswith("sqlite") and (":memory:" in url or url in ("sqlite://", "sqlite:///")):
        kwargs.pop("pool_size", None)  # one in-memory database, one connection: no pool to size
        kwargs.pop("max_overflow", None)
    else:
        # Connections for every thread that may hold one at once: the API's worker threads
        # (AnyIO's 40), the controller and its periodic work. SQLAlchemy's default of 15
        # made a burst of submits wait 30 s for one, then fail (bench_live_scale.py).
        kwargs.setdefault("pool_size", POOL_SIZE)
        kwargs.setdefault("max_overflow", POOL_OVERFLOW)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
                               **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_AUTOCHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
            cursor.close()

        _queue_writers(engine)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(url, pool_pre_ping=True, **kwargs)


def migrations_config() -> Config:
    """Alembic's configuration for the one chain of migrations shipped in the package."""
    config = Config()
    config.set_main_option("script_location", "trainyard.store:migrations")
    return config


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision of the one Alembic chain, saying so in one
    line when it changed (Alembic's own line per migration, 29 on a new install, is quiet)."""
    from alembic.runtime.migration import MigrationContext

    config = migrations_config()
    chatty = logging.getLogger("alembic.runtime.migration")
    level = chatty.level
    chatty.setLevel(max(level, logging.WARNING))
    try:
        with engine.begin() as connection:
            before = MigrationContext.configure(connection).get_current_revision()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            after = MigrationContext.configure(connection).get_current_revision()
    finally:
        chatty.setLevel(level)
    if after != before:
        log.info("database schema %s: %s", "created" if before is None else f"upgraded from {before}", after)


class Database:
    """Owns the engine and hands out sessions; one per server process."""

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, pool_overflow: int = POOL_OVERFLOW) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size, max_overflow=pool_overflow)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._checkpointer: threading.Thread | None = None
        self._disposed = threading.Event()

    def checkpoint_in_background(self, every: float = WAL_CHECKPOINT_SECONDS) -> None:
        """On SQLite, copy the write-ahead log into the database file from a thread of its own
        every ``every`` seconds, until ``dispose``; nothing on PostgreSQL.

        Else a commit does it when the log passes its threshold: inside the one write lock,
        syncing the file to disk, it held every other writer for up to 0.4 s (issue 33:
        the submits' p99). A passive checkpoint waits for no reader or writer, and a commit
        stays as durable as before: in the log, which the OS holds across a ``kill -9``
        (``synchronous=NORMAL``: not across a power cut, which may take the last commits)."""
        if self.engine.dialect.name != "sqlite" or self._checkpointer is not None:
            return
        self._checkpointer = threading.Thread(target=self._checkpoints, args=(every,),
                                              name="trainyard-wal-checkpoint", daemon=True)
        self._checkpointer.start()

    def _checkpoints(self, every: float) -> None:
        while not self._disposed.wait(every):
            try:
                with self.engine.connect() as connection:
                    connection.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # noqa: BLE001 - the next try may work; the commits checkpoint meanwhile
                log.warning("WAL checkpoint failed", exc_info=True)

    def migrate(self) -> None:
        migrate(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error."""
        with self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self._disposed.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=10)
        self.engine.dispose()


# Per thread: seconds waited for this process's SQLite writer lock, and whether it goes first.
_writer = threading.local()


def writer_wait_seconds() -> float:
    """Seconds the calling thread has waited, in all, for this process's SQLite writer lock
    (``_queue_writers``): the controller logs each cycle's share."""
    return getattr(_writer, "waited", 0.0)


def write_first() -> None:
    """Let the calling thread's transactions take this process's SQLite writer lock before
    any other thread waiting for it (the controller's: ``_WriterLock``)."""
    _writer.first = True


class _WriterLock:
    """The one writer's lock of ``_queue_writers``, where threads marked by ``write_first``
    go before the others waiting: a writer that holds it is never interrupted, but once it
    is done the next is a first one if any waits.

    Why (issue 33, the live server under a burst of submits): the controller writes a few
    short transactions a cycle (tasks seen ending, the cycle's placements, their launches),
    and each could wait behind the submit batches' transactions, one after another; every
    job waiting for the GPUs a cycle frees waits that much longer. A submit waits at most
    for the controller's transactions in progress or queued, each a few milliseconds to a
    few tens."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._held = False
        self._since = 0.0
        self._first_waiting = 0
        self.waiting = 0  # threads waiting now, first ones or not

    def acquire(self, timeout: float) -> bool:
        first = getattr(_writer, "first", False)
        with self._changed:
            if not self._held and (first or not self._first_waiting):
                self._held, self._since = True, time.perf_counter()
                return True
            began = time.perf_counter()
            self._first_waiting += first
            self.waiting += 1
            self._changed.notify_all()  # for whoever watches ``waiting``
            try:
                got = self._changed.wait_for(lambda: not self._held and (first or not self._first_waiting), timeout)
            finally:
                self._first_waiting -= first
                self.waiting -= 1
                _writer.waited = writer_wait_seconds() + time.perf_counter() - began
            if got:
                self._held, self._since = True, time.perf_counter()
            else:
                self._changed.notify_all()  # a first one giving up lets the others go
            return got

    def release(self) -> None:
        held = time.perf_counter() - self._since
        if held > LONG_WRITE_SECONDS:
            log.debug("the store's writer lock was held %.3f s by %s", held, threading.current_thread().name)
        with self._changed:
            self._held = False
            self._changed.notify_all()

    def wait_for_waiting(self, count: int, timeout: float) -> bool:
        """Whether ``count`` threads came to wait within ``timeout`` seconds (for tests)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.waiting >= count, timeout)


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLAC")  # what the sqlite3 module begins a transaction for


def _queue_writers(engine: Engine) -> None:
    """Make this process's writers to a SQLite file wait for each other in a lock, not in
    SQLite's busy handler.

    SQLite has one writer at a time. A writer that finds the file locked polls it, sleeping
    1, 2, 5 … up to 100 ms between tries: under many concurrent submits the unlucky ones
    waited for seconds (p99 1.4 s at 150 submits/s, issue 33) while the file sat unlocked
    between their sleeps. Here a connection takes a process-wide lock just before its
    first write of a transaction, the moment SQLite takes its own write lock (the sqlite3
    module begins the transaction there), and lets it go once the transaction has ended:
    the same one-writer rule, but the next writer goes on as soon as the last one is done.
    Readers never wait; other processes still meet the busy handler, and a writer that
    waits here longer than the busy timeout goes on to meet it too (as before)."""
    writer = _WriterLock()
    holder: list[Any] = [None]  # the DB-API connection holding ``writer``: one at a time
    dialect = engine.dialect
    plain_commit, plain_rollback = dialect.do_commit, dialect.do_rollback

    def release(connection: Any) -> None:
        if connection is not None and holder[0] is getattr(connection, "dbapi_connection", connection):
            holder[0] = None
            writer.release()

    @event.listens_for(engine, "before_cursor_execute")
    def _before_write(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if holder[0] is not cursor.connection and statement.lstrip()[:6].upper() in _WRITES:
            if writer.acquire(timeout=SQLITE_BUSY_TIMEOUT_S):
                holder[0] = cursor.connection

    def do_commit(dbapi_connection: Any) -> None:
        try:
            plain_commit(dbapi_connection)
        finally:
            release(dbapi_connection)

    def do_rollback(dbapi_connection: Any) -> None:
        try:
            plain_rollback(dbapi_connection)
        finally:
            release(dbapi_connection)

    dialect.do_commit = do_commit  # type: ignore[method-assign]  # this engine's dialect alone
    dialect.do_rollback = do_rollback  # type: ignore[method-assign]

    @event.listens_for(engine.pool, "checkin")
    def _returned(dbapi_connection: Any, _record: Any) -> None:  # ended without a commit or rollback
        release(dbapi_connection)

    @event.listens_for(engine.pool, "invalidate")
    def _invalidated(dbapi_connection: Any, _record: Any, _exception: Any) -> None:
        release(dbapi_connection)
