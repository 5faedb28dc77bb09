"""The 0008_campaign_headers migration creates exactly the tables of bot.features.header.store, on
SQLite and on PostgreSQL, and downgrades cleanly."""

from __future__ import annotations

import datetime as dt

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.orm import Session
from webhook_helpers import DB_KINDS, database_url

from bot.database import MIGRATIONS_DIR, Base, make_engine, migrate
from bot.features.header.store import CampaignHeader, CandidatePR, HeaderChange

TABLES = ("campaign_headers", "campaign_header_history", "campaign_candidate_prs")


def _diff(engine) -> list:
    with engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        return [d for d in compare_metadata(mc, Base.metadata)
                if any(t in repr(d) for t in TABLES)]


def _roundtrip(engine) -> None:
    migrate(engine)
    assert _diff(engine) == []
    now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    with Session(engine) as db:
        db.add(CampaignHeader(repo="o/r", path="campaigns/x", campaign_id="x", issue=3,
                              default_branch="main", inserted=False))
        db.add(HeaderChange(repo="o/r", issue=3, campaign_id="x", at=now, kind="write",
                            trigger="test", summary="header inserted"))
        db.add(CandidatePR(repo="o/r", number=5, title="t", head_sha="a" * 40, state="open",
                           touches=["campaigns/x"], updated_at=now))
        db.commit()
        assert db.query(CandidatePR).one().touches == ["campaigns/x"]
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0008_campaign_headers-1")
    names = set(inspect(engine).get_table_names())
    assert not names & set(TABLES)
    assert "screens" in names


@pytest.mark.parametrize("kind", DB_KINDS)
def test_header_migration(kind: str, tmp_path) -> None:
    with database_url(kind, tmp_path) as url:
        eng = make_engine(url)
        _roundtrip(eng)
        eng.dispose()
