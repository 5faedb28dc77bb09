"""`campaign-bot serve`, `deliveries`, `migrate`, `replay` (registered as a plug-in).

Cheap to import (``campaign-bot --help`` loads every plug-in): the service is imported inside
the commands.

Exit codes (as everywhere): 0 clean; 1 problems found (``deliveries --failed`` found failed
deliveries, ``replay`` met a bad signature or a failing handler); 2 unreadable input or bad
usage (missing settings, unreadable delivery file, database unreachable).

A ``campaign_bot.cli`` plug-in: this module imports only the standard library, typer and
rich at module level (the settings, the store, FastAPI and uvicorn are imported by the
command that uses them), see the plug-in contract in :mod:`evidence.cli`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from bot.settings import Settings

ENV_PREFIX = "CAMPAIGN_BOT_"

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _fail(msg: str, code: int = EXIT_USAGE, redact: Callable[[str], str] | None = None
          ) -> typer.Exit:
    """Print ``error: msg`` on stderr, secrets masked (``redact``, default the secret shapes
    of :class:`bot.redaction.Redactor`), and return the exit to raise."""
    from bot.redaction import Redactor
    from evidence.console import print_error

    print_error((redact or Redactor())(msg))
    return typer.Exit(code)


def _settings(*, need_secret: bool = True, **overrides: Any) -> Settings:
    from bot.settings import SettingsError, load_settings

    try:
        return load_settings(need_secret=need_secret,
                             **{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        raise _fail(str(exc)) from None


def _engine(db: Settings, *, migrate: bool = True, must_exist: bool = False) -> Any:
    """An engine on ``db.database_url``, migrated (``migrate``) or, on PostgreSQL when not,
    checked to be at the newest migration.  ``must_exist`` (read-only commands): a SQLite
    database file that does not exist is an error (exit 2) naming the path and the variable,
    instead of a new empty database created where the command was run."""
    from bot import database
    from bot.redaction import Redactor, mask_url, url_password

    if must_exist:
        missing = _missing_sqlite_file(db.database_url)
        if missing is not None:
            raise _fail(f"{missing}: no such database file ({ENV_PREFIX}DATABASE_URL="
                        f"{mask_url(db.database_url)}); run this command where the bot's "
                        f"database is, or set {ENV_PREFIX}DATABASE_URL to it (`campaign-bot "
                        "migrate` creates a new one)")
    try:
        engine = database.make_engine(db.database_url, sqlite_synchronous=db.sqlite_synchronous)
        if migrate or engine.dialect.name != "postgresql":
            database.migrate(engine)
        else:
            database.check_migrated(engine)
    except database.SchemaNotMigrated as exc:
        raise _fail(f"{ENV_PREFIX}DATABASE_URL={mask_url(db.database_url)}: {exc}",
                    redact=Redactor([url_password(db.database_url)])) from None
    except Exception as exc:  # noqa: BLE001 - any driver error: say which URL failed
        raise _fail(f"{ENV_PREFIX}DATABASE_URL: cannot open {mask_url(db.database_url)!r}: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    redact=Redactor([url_password(db.database_url)])) from None
    return engine


def _missing_sqlite_file(url: str) -> Path | None:
    """The absolute path of the file a SQLite ``url`` names when it does not exist; None for
    an existing file, an in-memory database, another backend, or a URL that does not parse
    (the engine reports that)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        u = make_url(url)
    except ArgumentError:
        return None
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:") \
            or u.database.startswith("file:"):
        return None
    path = Path(u.database)
    return None if path.exists() else path.resolve()


def serve(
    host: Annotated[str | None, typer.Option(help="Listen address [default: CAMPAIGN_BOT_HOST "
                                                  "or 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port [default: CAMPAIGN_BOT_PORT "
                                                  "or 8080]")] = None,
    access_log: Annotated[bool, typer.Option(help="Log every HTTP request")] = False,
) -> None:
    """Run the webhook service (FastAPI under uvicorn) until SIGINT/SIGTERM.

    With no webhook secret and no App credentials it starts in setup mode and prints a
    one-time URL whose page creates the GitHub App (CAMPAIGN_BOT_PUBLIC_URL must be set)."""
    settings = _settings(host=host, port=port, need_secret=False)
    setup_token = None
    if settings.webhook_secret is None:
        if settings.has_github_credentials or not settings.public_url:
            raise _fail(f"{ENV_PREFIX}WEBHOOK_SECRET is not set (environment variable or .env "
                        "file)" + ("" if settings.has_github_credentials else
                                   f"; to create the GitHub App from this service instead, set "
                                   f"{ENV_PREFIX}PUBLIC_URL to the https URL GitHub reaches "
                                   "it at"))
        from bot.setup import SetupFlow

        setup_token = SetupFlow.new_token()
    metrics_dir = None
    if settings.run_worker and settings.worker_mode == "process":
        # prometheus-client's multiprocess mode: chosen when it is first imported, so set
        # before anything below imports it; the worker process inherits the variable.
        metrics_dir = tempfile.mkdtemp(prefix="campaign-bot-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    try:
        _serve(settings, access_log, setup_token)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(settings: Settings, access_log: bool, setup_token: str | None = None) -> None:
    from bot.app import ExtraHandlersError, configure_logging, create_app, extra_features
    from bot.database import ServiceLock
    from bot.inbox.limits import run_server
    from bot.redaction import mask_url

    configure_logging(settings, "%(asctime)s %(levelname)s %(name)s: %(message)s")
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
                    f"{mask_url(settings.database_url)}; lock: {lock.where}); several "
                    "replicas need PostgreSQL (docs/deploy.md)")
    try:
        from bot.github.permissions import UnknownEvent
        from bot.manifest import ManifestError
        from bot.settings import SettingsError

        try:
            app = create_app(settings, engine=engine, setup_token=setup_token)
        except (SettingsError, ManifestError, UnknownEvent) as exc:
            raise _fail(f"{ENV_PREFIX}PUBLIC_URL: {exc}" if isinstance(exc, ManifestError)
                        else str(exc)) from None
        if setup_token is not None:
            from bot.setup import SetupFlow

            url = app.state.bot["setup"].setup_url(settings.public_url or "")
            assert isinstance(app.state.bot["setup"], SetupFlow)
            Console(soft_wrap=True, highlight=False).print(
                "No GitHub App is configured yet. Open this one-time setup URL in a browser "
                f"to create it (GitHub asks you to confirm):\n\n    {url}\n", markup=False)
            sys.stdout.flush()
        # uvicorn (its loggers propagate to the root handler, whose filter masks secrets:
        # configure_logging) with the limits of bot.inbox.limits: head and body deadlines, a
        # connection cap below the descriptor limit, a long listen queue, quiet logs
        started = run_server(app, host=settings.host, port=settings.port,
                             access_log=access_log, log_level=settings.log_level.lower(),
                             max_connections=settings.max_connections,
                             header_timeout_s=settings.header_timeout_s,
                             body_timeout_s=settings.body_timeout_s,
                             # SIGTERM: stop accepting, finish (or hand back) in-flight
                             # work, exit in bounded time
                             graceful_shutdown_s=10)
        if not started:
            raise SystemExit(3)  # uvicorn.run's exit status when it could not start
    finally:
        if lock is not None:
            lock.release()


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
    from rich.table import Table

    from bot.inbox import store

    engine = _engine(_settings(need_secret=False), must_exist=True)
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
    elif not rows:
        print("no failed deliveries stored" if failed else
              "no deliveries stored yet (`campaign-bot serve` stores each signed delivery "
              "GitHub sends to /webhook)")
    else:
        t = Table(title="failed deliveries" if failed else "deliveries (newest first)")
        for col in ("seq", "delivery", "event", "repository", "status", "attempts", "received",
                    "last error"):
            t.add_column(col, overflow="fold")
        for r in rows:
            ev = r["event"] + (f".{r['action']}" if r["action"] else "")
            t.add_row(str(r["seq"]), r["delivery_id"], ev, r["repo"] or "-", r["status"],
                      str(r["attempts"]), r["received_at"] or "-", (r["last_error"] or "")[:200])
        from evidence.console import output_console

        con = output_console()
        con.print(t)
        if failed:
            for r in rows:
                for f in r["failures"]:
                    con.print(f"{r['delivery_id']} attempt {f['attempt']} {f['handler']}: "
                              f"{f['error']}", highlight=False)
    if failed and rows:
        raise typer.Exit(EXIT_PROBLEMS)


def _missing(engine: Any, as_json: bool, limit: int) -> None:
    from rich.table import Table

    from bot.inbox.recovery import list_redeliveries, scan_position

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
        from evidence.console import output_console

        output_console().print(t)
        pos = scan_position(engine)
        if pos is None:
            print("webhook log scan: not run yet")
        elif pos["cursor"]:
            print(f"webhook log scan: in progress since {pos['started_at']}, {pos['pages']} "
                  "pages read; the next run resumes there")
        else:
            print(f"webhook log scan: the last scan is complete (it started from entry "
                  f"{pos['floor_id']}); the next run starts from the newest entry")
    if any(r["inbox_status"] is None for r in rows):
        raise typer.Exit(EXIT_PROBLEMS)


def replay(
    path: Annotated[Path, typer.Argument(metavar="DELIVERY.json", help="Headers and body: as "
                    "printed by `deliveries --export`, or as saved from GitHub's Recent "
                    "Deliveries (API `request.headers` + `request.payload`)")],
    apply: Annotated[bool, typer.Option("--apply", help="Really make the GitHub writes")] = False,
    resign: Annotated[bool, typer.Option("--resign", help="Sign the body with the configured "
                      "secret instead of checking its signature (hand-edited payloads)")] = False,
    offline: Annotated[bool, typer.Option("--offline", help="Make no GitHub request: reads "
                       "answer from the delivery's payload (the default without credentials)")
                       ] = False,
) -> None:
    """Feed one saved delivery through the signature check and the router; print the GitHub
    writes it would make (made only with --apply)."""
    import io
    import logging

    from bot.app import configure_logging
    from bot.app import replay as run_replay
    from bot.inbox import replay as rp

    # the file first: a missing or unreadable one is the problem to name, whatever the
    # settings (the default redactor masks secret shapes meanwhile)
    try:
        saved = rp.load_delivery_file(path)
    except rp.ReplayInputError as exc:
        raise _fail(str(exc)) from None
    settings = _settings()
    redact = configure_logging(settings, "%(levelname)s %(name)s: %(message)s",
                               tracebacks=False)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the scratch database's set-up
    try:
        report = run_replay(saved, settings, apply=apply, resign=resign, offline=offline)
    except rp.ReplayInputError as exc:
        raise _fail(str(exc), redact=redact) from None
    except rp.SignatureMismatch as exc:
        raise _fail(str(exc), EXIT_PROBLEMS, redact=redact) from None
    except Exception as exc:  # noqa: BLE001 - a clear line, never a traceback
        raise _fail(f"replay of {path} failed: {type(exc).__name__}: {exc}", EXIT_PROBLEMS,
                    redact=redact) from None
    out = Console()
    buf = io.StringIO()
    rp.print_report(report, Console(file=buf, width=out.width, no_color=True))
    sys.stdout.write(redact(buf.getvalue()))
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def app_manifest(
    url: Annotated[str, typer.Option("--url", help="Public base URL of this service, e.g. "
                                     "https://bot.example.org (webhooks go to URL/webhook)")],
    name: Annotated[str | None, typer.Option(help="App name (GitHub App names are unique; "
                                             "it can be changed on GitHub's page)")] = None,
    public: Annotated[bool, typer.Option(help="Let other accounts install the App")] = False,
    table: Annotated[bool, typer.Option(
        "--table", help="Print the permission and event tables (Markdown) for registering "
                        "the App by hand, instead of the JSON manifest")] = False,
) -> None:
    """Print the GitHub App manifest (JSON): the events the registered handlers subscribe to
    and the permissions the GitHub calls need."""
    from bot.app import ExtraHandlersError
    from bot.app import app_manifest as build
    from bot.github.permissions import UnknownEvent
    from bot.manifest import ManifestError, permission_table

    settings = _settings(need_secret=False)
    try:
        manifest = build(settings, url, name=name, public=public)
    except (ManifestError, ExtraHandlersError, UnknownEvent) as exc:
        raise _fail(f"--url {url}: {exc}" if isinstance(exc, ManifestError) else str(exc)
                    ) from None
    sys.stdout.write(permission_table(manifest) if table else
                     json.dumps(manifest, indent=2) + "\n")


def init(
    directory: Annotated[Path, typer.Argument(help="The repository checkout")] = Path("."),
    campaign: Annotated[str | None, typer.Option(
        "--campaign", help="Campaign name: its id and directory campaigns/NAME")] = None,
    runner_labels: Annotated[str | None, typer.Option(
        "--runner-labels", help="The pool's self-hosted runner labels, comma separated "
                                "(else a blank in campaign.toml)")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace the screen workflow when it differs from this version's "
                        "(without --campaign: write only the workflow).  Never overwrites "
                        ".github/campaign-bot.toml, campaign.toml or trusted-keys.pem: those "
                        "are created only when missing")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing: report how the repository's screen workflow differs "
                        "from this version's template, and problems of its "
                        ".github/campaign-bot.toml (exit 1 when anything differs)")] = False,
    inputs: Annotated[list[Path] | None, typer.Option(
        "--inputs", help="An input file (prompt.txt, ref.mp4, ref.wav...; repeat the option): "
                         "copied beside campaign.toml and its SHA-256 pinned in the [inputs] "
                         "entry with that path")] = None,
) -> None:
    """Set up a campaign repository: .github/campaign-bot.toml, the screen workflow, and a
    campaign skeleton.  Idempotent: a file that differs from this version's is kept.  Run it
    again after filling values: it lists only the blanks still empty."""
    from bot import scaffold
    from evidence.console import output_console

    out = output_console()
    if check:
        raise typer.Exit(_init_check(out, directory))
    labels = _init_labels(campaign, force, inputs, runner_labels)
    try:
        rep = _init_write(directory, campaign, labels, force, list(inputs or []))
    except scaffold.InitError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"{directory}: {exc}") from None
    _print_written(out, directory, rep)
    if campaign is not None:
        _print_next_steps(out, directory, rep)


def _init_labels(campaign: str | None, force: bool, inputs: list[Path] | None,
                 runner_labels: str | None) -> list[str]:
    """Check that ``init``'s options go together; the runner labels given, as a list."""
    if campaign is None and not force:
        raise _fail("--campaign NAME is required (or --check; or --force to replace only the "
                    "screen workflow)")
    if inputs and campaign is None:
        raise _fail("--inputs needs --campaign NAME (the campaign whose inputs to pin)")
    return [x for x in (runner_labels or "").split(",") if x.strip()]


def _init_check(out: Any, directory: Path) -> int:
    """``init --check``: print how the screen workflow differs from this version's and the
    config's problems; the exit status (0: nothing differs)."""
    from bot import scaffold

    if not directory.is_dir():
        raise _fail(f"{directory}: not a directory")
    rep = scaffold.check_repository(directory)
    wf = f"{scaffold.WORKFLOWS_DIR}/{rep.workflow}"
    if rep.state == "same":
        out.print(f"[green]{escape(wf)} is this version's template[/]")
    elif rep.state == "missing":
        out.print(f"[red]{escape(wf)} is missing[/]: run `campaign-bot init` to write it")
    else:
        out.print(f"[yellow]{escape(wf)} differs from this version's template[/] (run "
                  f"`campaign-bot init {escape(shlex.quote(str(directory)))} --force` to "
                  "replace it; your campaign files and config are kept):")
        for line in [f"  - {n}" for n in rep.notes] + list(rep.diff):
            out.print(escape(line))
    for prob in rep.config_problems:
        out.print(f"[red]config:[/] {escape(str(prob))}")
    return EXIT_OK if rep.ok else EXIT_PROBLEMS


def _init_write(directory: Path, campaign: str | None, labels: list[str], force: bool,
                inputs: list[Path]) -> Any:
    """Write what ``init`` writes (only the workflow without a campaign) and pin
    ``inputs``; the scaffold's report.  Raises :class:`bot.scaffold.InitError` and
    ``OSError``."""
    from bot import scaffold

    if campaign is None:
        return scaffold.refresh_workflow(directory, force=force)
    rep = scaffold.init_repository(directory, campaign, runner_labels=labels, force=force)
    if inputs:
        camp_dir = directory / rep.campaign_path
        pinned = scaffold.pin_inputs(camp_dir, inputs)
        rep.blanks = scaffold.blanks((camp_dir / "campaign.toml").read_text(
            encoding="utf-8", errors="replace"))
        for key, name, digest in pinned:
            rep.actions[f"{rep.campaign_path}/{name}"] = f"{key} sha256 {digest[:12]}"
    return rep


def _print_written(out: Any, directory: Path, rep: Any) -> None:
    """The table of files ``init`` wrote, and the files it kept."""
    from rich.table import Table

    from bot import scaffold

    t = Table(title=f"campaign-bot init {directory}", title_justify="left")
    t.add_column("file")
    t.add_column("action")
    for rel, action in rep.actions.items():
        t.add_row(rel, action)
    out.print(t)
    for rel in rep.kept:
        why = ("--force replaces it; `campaign-bot init --check` shows the difference"
               if scaffold.is_packaged(rel) else "init never overwrites it, even with --force")
        out.print(f"[yellow]kept[/] {escape(rel)}: it differs from this version's file "
                  f"(yours is kept; {why})")


def _print_next_steps(out: Any, directory: Path, rep: Any) -> None:
    """The blanks left in campaign.toml, the keys to add, and a note outside a checkout."""
    # paths as the user can use them from here: relative to the repository when it is the
    # current folder, else under the folder they named
    here = directory.resolve() == Path.cwd().resolve()
    where = rep.campaign_path if here else (directory / rep.campaign_path).as_posix()
    camp = escape(f"{where}/campaign.toml")
    check_cmd = escape(f"campaign-bot check {shlex.quote(where)}")
    if rep.blanks:
        out.print(f"\nFill these blanks in {camp}, then run `{check_cmd}`:")
        for b in rep.blanks:
            out.print(f"  line {b.line:>3}  {b.key}: {escape(b.hint)}")
    else:
        out.print(f"\n{camp} has no blanks left; `{check_cmd}` validates it.")
    out.print(f"Add each runner's public key to {escape(where)}/trusted-keys.pem (see "
              "the file), commit, and push to the default branch.")
    if git_checkout_of(directory) is None:
        out.print(f"[yellow]note:[/] {escape(str(directory))} is not inside a git checkout: the "
                  "bot reads these files from the repository on GitHub, so copy them into a "
                  "clone of the campaign repository (or run `git init` here and add the "
                  "GitHub remote) before you commit and push.")


def git_checkout_of(directory: Path) -> Path | None:
    """The top folder of the git checkout that holds ``directory`` (the nearest folder,
    ``directory`` itself or above, with a ``.git`` folder or, for a linked worktree or a
    submodule, a ``.git`` file), or None.  Looks at the file system only; runs no git."""
    here = directory.resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def doctor_bot(
    repo: Annotated[str | None, typer.Option(
        help="OWNER/NAME: mint the token of the App's installation on this repository "
             "[default: its first installation]")] = None,
) -> None:
    """Check the service's settings: App credentials mint an installation token, webhook
    secret set, database reachable and migrated, CAMPAIGN_BOT_PUBLIC_URL/healthz answers.
    Exit 0 all passed, 1 a check failed, 2 unreadable settings."""
    from bot.doctor import run_checks
    from evidence.console import output_console
    from evidence.doctor import print_checks

    if repo is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise _fail(f"--repo {repo!r}: use OWNER/NAME")
    settings = _settings(need_secret=False)
    raise typer.Exit(print_checks(output_console(), "campaign-bot doctor bot",
                                  run_checks(settings, repo)))


def migrate() -> None:
    """Upgrade the database to this version's newest migration (idempotent; the container
    runs it before serve).  On PostgreSQL it is required: serve refuses an older schema, so
    replicas never race to upgrade it; on SQLite serve also migrates as it starts.  Exit 0
    done, 2 database unreachable or bad settings."""
    from bot import database
    from bot.redaction import mask_url

    settings = _settings(need_secret=False)
    try:
        engine = database.make_engine(settings.database_url,
                                      sqlite_synchronous=settings.sqlite_synchronous)
        before, head = database.revisions(engine)
        rev = database.migrate(engine)
    except Exception as exc:  # noqa: BLE001 - any driver error: say which URL failed
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise _fail(f"{ENV_PREFIX}DATABASE_URL: cannot migrate "
                    f"{mask_url(settings.database_url)!r}: "
                    f"{type(exc).__name__}: {first}") from None
    Console(highlight=False).print(
        f"database at {rev}" + (" (already current)" if before == head else
                                f" (was {before or 'empty'})"))


def register(app: typer.Typer) -> None:
    """Add ``serve``, ``deliveries``, ``replay``, ``app-manifest``, ``init``, ``migrate``
    and ``doctor bot`` to ``app``."""
    from evidence.cli import DOCTOR_HELP, command_group

    app.command("app-manifest")(app_manifest)
    app.command("init")(init)
    app.command("migrate")(migrate)
    command_group(app, "doctor", DOCTOR_HELP).command("bot")(doctor_bot)
    app.command("serve")(serve)
    app.command("deliveries")(deliveries)
    app.command("replay")(replay)
