"""Engine and session setup for SQLite (default) and PostgreSQL, and schema migration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine tuned for Trainyard: SQLite in WAL mode with a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

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
    """Bring the schema to the newest revision of the one Alembic chain."""
    config = migrations_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class Database:
    """Owns the engine and hands out sessions; one per server process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def migrate(self) -> None:
        migrate(self.engine)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error."""
        with self._sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
