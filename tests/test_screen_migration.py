"""The 0002_screens migration creates exactly the tables the screen and budget models
describe, on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.orm import Session

import bot.budget  # noqa: F401 - registers budget_entries on Base
import bot.screens  # noqa: F401 - registers screens on Base
from bot.store import Base, make_engine, migrate

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _diff(engine) -> list:
    with engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(mc, Base.metadata)
                if any(t in repr(d) for t in ("screens", "budget_entries"))]


def _roundtrip(engine) -> None:
    # later issues add revisions after 0002_screens: the head must include it
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from bot.store import MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(cfg)
    head = migrate(engine)
    assert head == script.get_current_head()
    assert "0002_screens" in {r.revision for r in script.iterate_revisions(head, "base")}
    assert _diff(engine) == []
    with Session(engine) as db:
        from test_screen_queue_budget import add

        s = add(db)
        db.commit()
        assert s.id >= 1 and s.label == f"S{s.id}"


def test_migration_matches_models_sqlite(tmp_path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'm.sqlite3'}")
    _roundtrip(eng)
    eng.dispose()


@pytest.mark.postgres
def test_migration_matches_models_postgres() -> None:
    admin = make_engine(PG_URL)
    schema = f"t_i7_{uuid.uuid4().hex[:8]}"
    try:
        with admin.begin() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"PostgreSQL not reachable on 127.0.0.1:5432: {type(exc).__name__}")
    try:
        eng = make_engine(PG_URL, schema=schema)
        _roundtrip(eng)
        eng.dispose()
    finally:
        with admin.begin() as c:
            c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
