"""The 0002_screens migration creates exactly the tables the screen and budget models
describe, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.orm import Session
from webhook_helpers import DB_KINDS, database_url

import bot.features.screen.budget  # noqa: F401 - declares budget_entries on Base
import bot.features.screen.queue  # noqa: F401 - declares screens on Base
from bot.database import Base, make_engine, migrate


def _diff(engine) -> list:
    with engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(mc, Base.metadata)
                if any(t in repr(d) for t in ("screens", "budget_entries", "screen_commands"))]


def _roundtrip(engine) -> None:
    # later issues add revisions after 0002_screens: the head must include it
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from bot.database import MIGRATIONS_DIR

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


@pytest.mark.parametrize("kind", DB_KINDS)
def test_migration_matches_models(kind: str, tmp_path) -> None:
    with database_url(kind, tmp_path) as url:
        eng = make_engine(url)
        _roundtrip(eng)
        eng.dispose()
