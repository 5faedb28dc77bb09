"""Read one campaign's budget ledger and screens from the bot's database (``--database``).

The tables are the bot's ``budget_entries`` and ``screens`` (created by the bot's Alembic
migration ``0002_screens``).  This module declares, with SQLAlchemy Core, only the columns it
reads, and never writes: the dashboard imports no other feature's code, and a read-only
report cannot disturb the service.  SQLite and PostgreSQL URLs both work (any SQLAlchemy
URL whose driver is installed).

Times the database returns without a zone (SQLite) are UTC, as the bot writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    inspect,
    select,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from bot.features.dashboard.views import Ledger, LedgerEntry, LedgerScreen

_md = MetaData()
BUDGET_ENTRIES = Table(
    "budget_entries", _md,
    Column("id", Integer, primary_key=True),
    Column("repo", String(200)),
    Column("campaign", String(200)),
    Column("kind", String(16)),
    Column("directions", Integer),
    Column("wall_hours", Float),
    Column("device_hours", Float),
    Column("screen_id", Integer),
    Column("by", String(100)),
    Column("reason", Text),
    Column("at", DateTime(timezone=True)),
)
"""The columns of the bot's budget ledger this report reads (one row per change)."""
SCREENS = Table(
    "screens", _md,
    Column("id", Integer, primary_key=True),
    Column("repo", String(200)),
    Column("pr_number", Integer),
    Column("campaign", String(200)),
    Column("campaign_path", String(500)),
    Column("kind", String(16)),
    Column("candidate", String(200)),
    Column("track", String(200)),
    Column("pool", String(200)),
    Column("state", String(16)),
    Column("conclusion", String(32)),
    Column("verdict", String(32)),
    Column("requested_by", String(100)),
    Column("requested_at", DateTime(timezone=True)),
    Column("dispatched_at", DateTime(timezone=True)),
    Column("started_at", DateTime(timezone=True)),
    Column("completed_at", DateTime(timezone=True)),
    Column("estimate_device_s", Float),
    Column("estimate_wall_s", Float),
    Column("charged_device_s", Float),
    Column("charged_wall_s", Float),
    Column("runner_name", String(200)),
    Column("run_url", String(500)),
)
"""The columns of the bot's ``screens`` table the dashboard reads (this report's screen
history, and the live pages' queue), read-only."""


class LedgerError(ValueError):
    """The database cannot be read as the bot's: bad URL, missing driver, missing tables, or
    a campaign recorded for several repositories without ``repo`` given."""


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None or dt.tzinfo is not None:
        return dt
    return dt.replace(tzinfo=UTC)


def _h(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600.0


def read_ledger(url: str, campaign: str, repo: str | None = None) -> Ledger:
    """Every ``budget_entries`` row (oldest first) and ``screens`` row of ``campaign`` in the
    database at ``url`` (a SQLAlchemy URL, e.g. ``sqlite:///bot.db`` or
    ``postgresql+psycopg://user@host/db``), optionally of one ``repo`` (``owner/name``).

    Raises :class:`LedgerError` with a one-line reason; the URL in messages and in the
    result has its password hidden.
    """
    try:
        u = make_url(url)
    except ArgumentError as e:
        raise LedgerError(f"not a database URL: {e}") from None
    if u.drivername == "postgresql":  # the bot's convention: plain postgresql:// is psycopg 3
        u = u.set(drivername="postgresql+psycopg")
    shown = u.render_as_string(hide_password=True)
    if u.drivername.startswith("sqlite") and u.database not in (None, "", ":memory:") \
            and not u.database.startswith("file:") and not Path(u.database).is_file():
        # SQLite would create an empty file: a typo must not leave a new database behind
        raise LedgerError(f"{shown}: no such database file")
    try:
        engine = create_engine(u)
    except (NoSuchModuleError, ImportError, ArgumentError) as e:
        raise LedgerError(f"{shown}: cannot use this database driver: {e}") from None
    try:
        return read_ledger_from(engine, campaign, repo, shown=shown)
    finally:
        engine.dispose()


def read_ledger_from(engine: Engine, campaign: str, repo: str | None = None, *,
                     shown: str = "the database") -> Ledger:
    """:func:`read_ledger` on an open ``engine`` (left open); ``shown`` names the database in
    messages.  Raises :class:`LedgerError`."""
    try:
        with engine.connect() as db:
            _check_tables(db, shown)
            cond, scond = _conditions(db, campaign, repo)
            entries = [_entry(r) for r in db.execute(
                select(BUDGET_ENTRIES).where(*cond).order_by(BUDGET_ENTRIES.c.id))]
            screens = [_screen(r) for r in db.execute(
                select(SCREENS).where(*scond).order_by(SCREENS.c.id))]
    except LedgerError:
        raise
    except SQLAlchemyError as e:
        why = str(getattr(e, "orig", None) or e).splitlines()[0]
        raise LedgerError(f"{shown}: cannot read the budget ledger: {why}") from None
    return Ledger(url=shown, repo=repo, entries=entries, screens=screens)


def _check_tables(db: Any, shown: str) -> None:
    """Raise :class:`LedgerError` when the bot's ledger tables are not in ``db``."""
    insp = inspect(db)
    missing = [t for t in ("budget_entries", "screens") if not insp.has_table(t)]
    if missing:
        raise LedgerError(
            f"{shown}: no table {', '.join(missing)}: not the bot's database, or its "
            "migrations have not run (campaign-bot serve runs them at start)")


def _conditions(db: Any, campaign: str, repo: str | None) -> tuple[list[Any], list[Any]]:
    """The row filters of the budget entries and the screens of ``campaign`` (in ``repo``);
    without a repository, raise :class:`LedgerError` when the campaign's records are in
    more than one."""
    cond = [BUDGET_ENTRIES.c.campaign == campaign]
    scond = [SCREENS.c.campaign == campaign]
    if repo is not None:
        return ([*cond, BUDGET_ENTRIES.c.repo == repo], [*scond, SCREENS.c.repo == repo])
    repos = sorted(set(db.scalars(select(BUDGET_ENTRIES.c.repo).where(*cond).distinct()))
                   | set(db.scalars(select(SCREENS.c.repo).where(*scond).distinct())))
    if len(repos) > 1:
        raise LedgerError(
            f"campaign {campaign!r} has budget records in {len(repos)} "
            f"repositories ({', '.join(repos)}): pick one with --repo")
    return cond, scond


def _at(value: Any) -> datetime:
    """A row's time in UTC; the earliest time there is for a row without one (sorts first)."""
    return _utc(value) or datetime.min.replace(tzinfo=UTC)


def _entry(r: Any) -> LedgerEntry:
    """A ``budget_entries`` row as a :class:`LedgerEntry`."""
    return LedgerEntry(at=_at(r.at), kind=r.kind,
                       directions=int(r.directions or 0), wall_hours=float(r.wall_hours or 0.0),
                       device_hours=float(r.device_hours or 0.0), screen=r.screen_id,
                       by=r.by or "", reason=r.reason or "")


def _screen(r: Any) -> LedgerScreen:
    """A ``screens`` row as a :class:`LedgerScreen` (seconds as hours)."""
    return LedgerScreen(
        id=r.id, label=f"S{r.id}", candidate=r.candidate if r.kind == "candidate" else "control",
        track=r.track, state=r.state, conclusion=r.conclusion, verdict=r.verdict,
        requested_by=r.requested_by, requested_at=_at(r.requested_at),
        completed_at=_utc(r.completed_at), estimate_wall_h=_h(r.estimate_wall_s) or 0.0,
        estimate_device_h=_h(r.estimate_device_s) or 0.0,
        charged_device_h=_h(r.charged_device_s), charged_wall_h=_h(r.charged_wall_s),
        run_url=r.run_url, pr_number=r.pr_number, pool=r.pool)
