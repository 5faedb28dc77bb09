"""The bot's database: the declarative base every table is declared on, engines for SQLite and
PostgreSQL, the Alembic migrations, the lock that lets one ``serve`` use an SQLite database,
the replica names and the scheduler's leader lock of several ``serve`` replicas on one
PostgreSQL database.

Tables are created and upgraded only through the Alembic revisions in ``bot/migrations``
(run at start by :func:`migrate`, identical on SQLite and PostgreSQL).  A feature that adds a
table declares it on :class:`Base` in its own package and adds a revision under
``bot/migrations/versions`` (``down_revision`` = the newest one there).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def utcnow() -> dt.datetime:
    """Timezone-aware now in UTC."""
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    """Declarative base of every bot table (the inbox's and each feature's)."""


def make_engine(url: str, *, sqlite_synchronous: str = "FULL", schema: str | None = None) -> Engine:
    """An Engine for ``url``.

    SQLite: WAL journal (readers never block the writer), ``synchronous`` as given (FULL:
    every commit is fsynced, an accepted delivery survives power loss; NORMAL: survives a
    process crash only), 30 s busy timeout.  PostgreSQL (``postgresql://`` URLs use psycopg 3):
    ``schema`` sets the ``search_path`` (tests use one schema per test).
    """
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_pre_ping=False
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sqlite_synchronous}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if schema:
        kwargs["connect_args"] = {"options": f"-csearch_path={schema}"}
    return create_engine(url, **kwargs)


def quiet_alembic() -> None:
    """Raise the ``alembic`` loggers to WARNING unless the log level is DEBUG.

    Alembic logs each migration step and, when ``alembic.command`` is first imported, each
    plug-in it sets up (``alembic.runtime.plugins``) at INFO; they would bury what ``serve``
    prints at start (the setup URL).  Call before importing alembic.  Idempotent."""
    import logging

    log = logging.getLogger("alembic")
    if log.getEffectiveLevel() > logging.DEBUG:
        log.setLevel(logging.WARNING)


def migrate(engine: Engine) -> str:
    """Upgrade the database to the newest migration (idempotent); returns the revision."""
    quiet_alembic()  # before the imports: importing alembic.command logs at INFO
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with engine.connect() as conn:
        rev = MigrationContext.configure(conn).get_current_revision()
    return rev or ""


def revisions(engine: Engine) -> tuple[str | None, str]:
    """``(current, head)``: the database's migration revision (None: never migrated) and the
    newest one this version ships.  Reads only; raises the driver's error when the database
    cannot be reached."""
    quiet_alembic()
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, head_revision()


class SchemaNotMigrated(Exception):
    """The database schema is not at the newest migration; the message says which revision
    it is at, which one is needed, and to run ``campaign-bot migrate``."""


def head_revision() -> str:
    """The newest revision in ``bot/migrations/versions``."""
    quiet_alembic()
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(cfg).get_current_head() or ""


def check_migrated(engine: Engine) -> str:
    """The schema's revision when it is the newest one; raises :class:`SchemaNotMigrated`
    otherwise (several replicas must not each upgrade a shared schema as they start)."""
    current, head = revisions(engine)
    if (current or "") != head:
        raise SchemaNotMigrated(
            f"the database schema is at revision {current or '(none: empty database)'}, this "
            f"campaign-bot needs {head}: run `campaign-bot migrate` once (with the same "
            "CAMPAIGN_BOT_DATABASE_URL), then start serve")
    return current or ""


def replica_name(pid: int) -> str:
    """The name a ``serve`` process claims deliveries under: ``host:pid`` (its worker process
    passes the parent's pid, so a restarted worker takes its own serve's claims back)."""
    import socket

    return f"{socket.gethostname()}:{pid}"


class JobLeader:
    """Which replica runs the scheduled jobs: the holder of a PostgreSQL session advisory lock
    keyed on the schema (``pg_try_advisory_lock``), tried again at each job run, so when the
    leader dies (its session ends, ``kill -9`` included) another replica takes over at its
    next run.  On SQLite (one process) this process always leads.  Call :meth:`__call__`
    from the scheduler's threads; :meth:`close` gives the lock back."""

    def __init__(self, engine: Engine) -> None:
        import threading

        self.engine = engine
        self._conn: Any = None
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        """True when this process leads (taking the lock if it is free)."""
        if self.engine.dialect.name != "postgresql":
            return True
        from sqlalchemy import text

        with self._lock:
            try:
                if self._conn is not None:
                    self._conn.execute(text("SELECT 1"))
                    return True
                conn = self.engine.connect()
                got = conn.execute(text(
                    "SELECT pg_try_advisory_lock(hashtext('campaign-bot jobs ' || "
                    "current_schema()))")).scalar()
                conn.commit()
                if got:
                    self._conn = conn
                    return True
                conn.invalidate()
                conn.close()
                return False
            except Exception:  # noqa: BLE001 - a lost session lost the lock with it
                self._drop()
                return False

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.invalidate()
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Give the lock back (the session is discarded, not pooled)."""
        with self._lock:
            self._drop()


class ServiceLock:
    """Held by the one ``campaign-bot serve`` that may use an SQLite database (see
    :func:`bot.inbox.store.recover`): an ``flock`` on ``<sqlite file>.serve.lock``.  On
    PostgreSQL it is a session advisory lock keyed on the schema, for a caller that must be
    alone; ``serve`` takes none there (replicas claim with leases).  Both are released by the
    kernel/server when the process dies, ``kill -9`` included."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._fh: Any = None
        self._conn: Any = None
        self._schema: Any = None
        self.where = ""

    def acquire(self) -> bool:
        """Take the lock; False when another process holds it."""
        if self.engine.dialect.name == "sqlite":
            db = self.engine.url.database
            if not db or db == ":memory:":
                return True
            import fcntl

            self.where = f"{Path(db).resolve()}.serve.lock"
            self._fh = open(self.where, "a+")  # noqa: SIM115 - held for the process lifetime
            try:
                fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._fh.close()
                self._fh = None
                return False
            return True
        from sqlalchemy import text

        self._conn = self.engine.connect()
        schema = self._conn.execute(text("SELECT current_schema()")).scalar()
        self.where = f"PostgreSQL advisory lock on schema {schema}"
        self._schema = schema
        got = self._conn.execute(
            text("SELECT pg_try_advisory_lock(hashtext('campaign-bot serve ' || :s))"),
            {"s": schema},
        ).scalar()
        self._conn.commit()
        if not got:
            self._conn.close()
            self._conn = None
        return bool(got)

    def release(self) -> None:
        """Give the lock back."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._conn is not None:
            from sqlalchemy import text

            # unlock now: a closed session's locks go only when the server notices, so a
            # second acquire right after could still find this one held
            with contextlib.suppress(Exception):
                self._conn.execute(
                    text("SELECT pg_advisory_unlock(hashtext('campaign-bot serve ' || :s))"),
                    {"s": self._schema})
            # a pooled connection would keep the session, and with it the lock
            self._conn.invalidate()
            self._conn.close()
            self._conn = None
