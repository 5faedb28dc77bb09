"""`campaign-bot serve`, `deliveries`, `migrate`, `replay` (registered as a plug-in).

Cheap to import (``campaign-bot --help`` loads every plug-in): the service is imported inside
the commands.

Exit codes (as everywhere): 0 clean; 1 problems found (``deliveries --failed`` found failed
deliveries, ``replay`` met a bad signature or a failing handler); 2 unreadable input or bad
usage (missing settings, unreadable delivery file, database unreachable).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from bot.settings import Settings

ENV_PREFIX = "CAMPAIGN_BOT_"

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _fail(msg: str, code: int = EXIT_USAGE) -> typer.Exit:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(msg)}",
                                               highlight=False)
    return typer.Exit(code)


def _settings(*, need_secret: bool = True, **overrides: Any) -> Settings:
    from bot.settings import SettingsError, load_settings

    try:
        return load_settings(need_secret=need_secret,
                             **{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        raise _fail(str(exc)) from None


def _engine(db: Settings, *, migrate: bool = True) -> Any:
    """An engine on ``db.database_url``, migrated (``migrate``) or, on PostgreSQL when not,
    checked to be at the newest migration."""
    from bot import database

    try:
        engine = database.make_engine(db.database_url, sqlite_synchronous=db.sqlite_synchronous)
        if migrate or engine.dialect.name != "postgresql":
            database.migrate(engine)
        else:
            database.check_migrated(engine)
    except database.SchemaNotMigrated as exc:
        raise _fail(f"{ENV_PREFIX}DATABASE_URL={db.database_url}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any driver error: say which URL failed
        raise _fail(f"{ENV_PREFIX}DATABASE_URL: cannot open {db.database_url!r}: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    ) from None
    return engine


def serve(
    host: Annotated[str | None, typer.Option(help="Listen address [default: CAMPAIGN_BOT_HOST "
                                                  "or 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port [default: CAMPAIGN_BOT_PORT "
                                                  "or 8080]")] = None,
    access_log: Annotated[bool, typer.Option(help="Log every HTTP request")] = False,
) -> None:
    """Run the webhook service (FastAPI under uvicorn) until SIGINT/SIGTERM."""
    settings = _settings(host=host, port=port)
    metrics_dir = None
    if settings.run_worker and settings.worker_mode == "process":
        # prometheus-client's multiprocess mode: chosen when it is first imported, so set
        # before anything below imports it; the worker process inherits the variable.
        metrics_dir = tempfile.mkdtemp(prefix="campaign-bot-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        _serve(settings, access_log)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(settings: Settings, access_log: bool) -> None:
    import uvicorn

    from bot.app import ExtraHandlersError, create_app, extra_features
    from bot.database import ServiceLock

    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # SQLite: migrated here (one process); PostgreSQL: refused unless `campaign-bot migrate`
    # brought the schema to the newest revision (replicas must not race to upgrade it)
    engine = _engine(settings, migrate=False)
    try:
        extra_features(settings.extra_handler_modules)  # fail now, not in the worker
    except ExtraHandlersError as exc:
        raise _fail(str(exc)) from None

    # SQLite: one serve per database, whose start-up requeues every delivery left
    # "processing". PostgreSQL: any number of replicas, each claiming with a lease.
    lock = ServiceLock(engine) if engine.dialect.name == "sqlite" else None
    if lock is not None and not lock.acquire():
        raise _fail(f"another campaign-bot serve uses this database ({ENV_PREFIX}DATABASE_URL="
                    f"{settings.database_url}; lock: {lock.where}); several replicas need "
                    "PostgreSQL (docs/deploy.md)")
    try:
        app = create_app(settings, engine=engine)
        # SIGTERM: stop accepting, finish (or hand back) in-flight work, exit in bounded time
        uvicorn.run(app, host=settings.host, port=settings.port, access_log=access_log,
                    log_level=settings.log_level.lower(), lifespan="on",
                    timeout_graceful_shutdown=10)
    finally:
        if lock is not None:
            lock.release()


def migrate() -> None:
    """Upgrade the database (CAMPAIGN_BOT_DATABASE_URL) to the newest schema and print the
    revision.  Needed once per release before PostgreSQL replicas start; `serve` on SQLite
    does it itself."""
    from bot import database

    settings = _settings(need_secret=False)
    engine = _engine(settings, migrate=True)
    Console().print(f"database at revision {database.check_migrated(engine)}", highlight=False)


def deliveries(
    failed: Annotated[bool, typer.Option("--failed", help="Only deliveries that failed their "
                                                          "last attempt (exit 1 if any)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout")] = False,
    limit: Annotated[int, typer.Option(min=1, help="Newest N deliveries")] = 50,
    export: Annotated[str | None, typer.Option(
        metavar="DELIVERY_ID", help="Print one stored delivery (headers and body) as a replay "
                                    "file")] = None,
    missing: Annotated[bool, typer.Option(
        "--missing", help="Deliveries GitHub failed to deliver that the bot asked it to "
                          "redeliver, with the outcome and whether they have arrived (exit 1 "
                          "if any has not)")] = False,
) -> None:
    """List stored webhook deliveries (newest first) with their status and failures."""
    from bot.inbox import store

    engine = _engine(_settings(need_secret=False))
    if missing:
        _missing(engine, as_json, limit)
        return
    if export is not None:
        d = store.get_delivery(engine, export)
        if d is None:
            raise _fail(f"no stored delivery {export!r}", EXIT_USAGE)
        sys.stdout.write(json.dumps(store.export_delivery(d), indent=2) + "\n")
        return
    rows = store.list_deliveries(engine, failed_only=failed, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        t = Table(title="failed deliveries" if failed else "deliveries (newest first)")
        for col in ("seq", "delivery", "event", "repository", "status", "attempts", "received",
                    "last error"):
            t.add_column(col, overflow="fold")
        for r in rows:
            ev = r["event"] + (f".{r['action']}" if r["action"] else "")
            t.add_row(str(r["seq"]), r["delivery_id"], ev, r["repo"] or "-", r["status"],
                      str(r["attempts"]), r["received_at"] or "-", (r["last_error"] or "")[:200])
        out = Console()
        con = out if out.is_terminal else Console(width=200)
        con.print(t)
        if failed:
            for r in rows:
                for f in r["failures"]:
                    con.print(f"{r['delivery_id']} attempt {f['attempt']} {f['handler']}: "
                              f"{f['error']}", highlight=False)
    if failed and rows:
        raise typer.Exit(EXIT_PROBLEMS)


def _missing(engine: Any, as_json: bool, limit: int) -> None:
    from bot.inbox.recovery import list_redeliveries

    rows = list_redeliveries(engine, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        t = Table(title="missed deliveries asked for again (newest first)")
        for col in ("delivery", "event", "failed with", "delivered", "asked", "outcome",
                    "tries", "in the inbox"):
            t.add_column(col, overflow="fold")
        for r in rows:
            ev = r["event"] + (f".{r['action']}" if r["action"] else "")
            code = str(r["failed_status_code"]) + (f" {r['failed_status']}"
                                                   if r["failed_status"] else "")
            outcome = r["outcome"] + (f": {r['error'][:120]}" if r["error"] else "")
            t.add_row(r["guid"], ev, code, r["delivered_at"], r["requested_at"], outcome,
                      str(r["tries"]), r["inbox_status"] or "not yet")
        out = Console()
        (out if out.is_terminal else Console(width=200)).print(t)
    if any(r["inbox_status"] is None for r in rows):
        raise typer.Exit(EXIT_PROBLEMS)


def replay(
    path: Annotated[Path, typer.Argument(metavar="DELIVERY.json", help="Headers and body: as "
                    "printed by `deliveries --export`, or as saved from GitHub's Recent "
                    "Deliveries (API `request.headers` + `request.payload`)")],
    apply: Annotated[bool, typer.Option("--apply", help="Really make the GitHub writes")] = False,
    resign: Annotated[bool, typer.Option("--resign", help="Sign the body with the configured "
                      "secret instead of checking its signature (hand-edited payloads)")] = False,
) -> None:
    """Feed one saved delivery through the signature check and the router; print the GitHub
    writes it would make (made only with --apply)."""
    from bot.app import replay as run_replay
    from bot.inbox import replay as rp

    settings = _settings()
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        saved = rp.load_delivery_file(path)
    except rp.ReplayInputError as exc:
        raise _fail(str(exc)) from None
    try:
        report = asyncio.run(run_replay(saved, settings, apply=apply, resign=resign))
    except rp.ReplayInputError as exc:
        raise _fail(str(exc)) from None
    except rp.SignatureMismatch as exc:
        raise _fail(str(exc), EXIT_PROBLEMS) from None
    rp.print_report(report, Console())
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``deliveries``, ``migrate`` and ``replay`` to ``app``."""
    app.command("serve")(serve)
    app.command("deliveries")(deliveries)
    app.command("migrate")(migrate)
    app.command("replay")(replay)
