"""Alembic environment: run programmatically by ``bot.database.migrate`` with a connection in
``config.attributes["connection"]`` (no alembic.ini needed)."""

from __future__ import annotations

from alembic import context

from bot.database import Base

target_metadata = Base.metadata
connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only bot.database.migrate drives this env
    raise RuntimeError("run migrations through bot.database.migrate(engine)")

context.configure(
    connection=connection,
    target_metadata=target_metadata,
    # SQLite cannot ALTER most things; batch mode rebuilds tables so that later revisions
    # behave the same on SQLite and PostgreSQL.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
