"""Alembic environment: runs migrations on the connection Trainyard hands in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from trainyard.store.rows import Base

config = context.config
target_metadata = Base.metadata

connection = config.attributes.get("connection")
if connection is None:  # e.g. `alembic revision --autogenerate` from a developer's shell
    connection = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite://").connect()

context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
