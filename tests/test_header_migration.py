"""The 0008_campaign_headers migration creates exactly the tables of bot.header_store, on
SQLite and on PostgreSQL, and downgrades cleanly."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from bot.header_store import CampaignHeader, CandidatePR, HeaderChange
from bot.store import MIGRATIONS_DIR, Base, make_engine, migrate

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
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


def test_header_migration_sqlite(tmp_path) -> None:
    eng = make_engine(f"sqlite:///{tmp_path / 'h.sqlite3'}")
    _roundtrip(eng)
    eng.dispose()


@pytest.mark.postgres
def test_header_migration_postgres() -> None:
    admin = make_engine(PG_URL)
    schema = f"t_i8_{uuid.uuid4().hex[:8]}"
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
