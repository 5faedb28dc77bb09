"""The composition root: the one place that builds the service from its parts.

    settings ─► database ─► GitHub port factory ─► features ─► one scheduler ─► FastAPI app

* :func:`create_app` reads as that line: the web app of ``campaign-bot serve`` (inbox writer,
  ``/webhook``, ``/healthz``, ``/metrics``) and, where the handlers run, the worker with the
  composed features and their jobs on one scheduler.
* :func:`compose` adds the features to a :class:`bot.registry.Registry`, explicitly and in a
  fixed order (the order their handlers run for one event): config, help, review, screen,
  header, notify, then the modules named by ``CAMPAIGN_BOT_EXTRA_HANDLERS``.  Features never
  import each other; what one tells another (the screen queue shown in the status header;
  notices, :mod:`bot.events`) is wired here.
* :func:`worker_main` is the worker process (``python -m bot.worker_process``): it receives
  the parent's settings on a pipe and composes the features the same way.

Nothing here (or anywhere in ``bot/``) keeps state at module level: every object lives in the
application that made it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.engine import Engine

from bot import database
from bot.features import config, header, help, notify, review, screen
from bot.features.dashboard import api as dashboard_api
from bot.features.dashboard import live
from bot.features.dashboard.signin import SignIn
from bot.features.screen import queue as screen_queues
from bot.features.screen.campaign_state import campaign_state
from bot.github.git import GitMirrors
from bot.inbox import recovery, store
from bot.inbox import replay as replay_mod
from bot.inbox.endpoint import Inbox, add_routes
from bot.inbox.limits import BodyLimits, install_accept_error_handler
from bot.inbox.replay import ReplayReport, SavedDelivery
from bot.inbox.router import Event, Router
from bot.inbox.worker import ContextFactory, Worker
from bot.inbox.worker_process import WorkerProcess, die_with_parent, read_settings_fd, run_child
from bot.inbox.writer import Checkpointer, InboxWriter
from bot.metrics import Metrics
from bot.redaction import RedactingFilter, Redactor, url_password
from bot.registry import Registry
from bot.repo_config import RepoConfigs
from bot.scheduler import Job, start_scheduler
from bot.security_headers import SecurityHeaders
from bot.settings import (
    ENV_PREFIX,
    Settings,
    SettingsError,
    dump_settings,
    restore_settings,
)

log = logging.getLogger(__name__)

FEATURES = tuple(f.__name__ for f in (config, help, review, screen, header, notify))
"""The features :func:`compose` adds, in order (the dashboard is a CLI plug-in)."""
WORKER_MODULE = "bot.worker_process"
"""``python -m bot.worker_process`` runs :func:`worker_main`."""


class ExtraHandlersError(Exception):
    """A module named in ``CAMPAIGN_BOT_EXTRA_HANDLERS`` cannot be imported or has no
    ``register(app)``; the message names the setting and the module."""


def extra_features(modules: Sequence[str]) -> list[Callable[[Registry], None]]:
    """The ``register(app)`` of each module in ``modules`` (imported here).

    Raises :class:`ExtraHandlersError`."""
    out = []
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported with the setting's name
            raise ExtraHandlersError(
                f"CAMPAIGN_BOT_EXTRA_HANDLERS: cannot import {name!r}: {type(exc).__name__}: "
                f"{exc}") from None
        fn = getattr(mod, "register", None)
        if not callable(fn):
            raise ExtraHandlersError(f"CAMPAIGN_BOT_EXTRA_HANDLERS: module {name!r} has no "
                                     "register(app) function")
        out.append(fn)
    return out


def secret_values(settings: Settings) -> list[str]:
    """Every secret ``settings`` holds, as text: the webhook secret, the token, the App private
    key (an unreadable key file adds nothing) and the database URL's password."""
    out = [s.get_secret_value() for s in (settings.webhook_secret, settings.token)
           if s is not None]
    try:
        got = settings.private_key_text()  # masked even when it is not a usable key
    except SettingsError:
        got = None
    if got and got[0]:
        out.append(got[0])
    password = url_password(settings.database_url)
    if password:
        out.append(password)
    return out


class _BriefTracebacks(logging.Filter):
    """Drops tracebacks from records (the message stays): for operator commands, whose
    failures are reported as results; ``CAMPAIGN_BOT_LOG_LEVEL=DEBUG`` keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def configure_logging(settings: Settings, fmt: str, *, tracebacks: bool = True) -> Redactor:
    """Log at ``settings.log_level`` in format ``fmt`` to stderr (``logging.basicConfig``: a
    process whose root logger has handlers keeps them), every record masked by a
    :class:`bot.redaction.RedactingFilter` over :func:`secret_values` (installed on every
    root handler; uvicorn's loggers propagate to the root, see ``campaign-bot serve``).
    ``tracebacks=False`` drops tracebacks below DEBUG.  Returns the redactor, for messages
    printed outside logging."""
    redactor = Redactor(secret_values(settings))
    logging.basicConfig(level=settings.log_level.upper(), format=fmt)
    root = logging.getLogger()
    for handler in root.handlers:
        if not tracebacks and root.level > logging.DEBUG:
            handler.addFilter(_BriefTracebacks())
        handler.addFilter(RedactingFilter(redactor))
    return redactor


def github_configured(settings: Settings) -> bool:
    """True when the settings let the service call GitHub: App id with a private key, or a
    token (the same rule as :attr:`bot.github.pygithub.GitHubClients.configured`)."""
    return bool(settings.token is not None and settings.token.get_secret_value()) or bool(
        settings.app_id and settings.private_key_pem())


def github_context(settings: Settings, *, configs: RepoConfigs | None = None,
                   metrics: Metrics | None = None, throttle: bool | None = None,
                   retry: Any = None) -> ContextFactory:
    """The worker's per-event GitHub factory: ``(port, repo config)`` for each event's
    repository (GitHub App installation auth when ``CAMPAIGN_BOT_APP_ID`` and a private key
    are set, else ``CAMPAIGN_BOT_TOKEN``), the config read through ``configs``.

    An event without a repository (``installation``, ``ping``) gets a port that refuses every
    call.  Without credentials the service still starts (deliveries are stored and can be
    retried); the factory raises :class:`bot.github.GitHubError` for each event.  Raises
    :class:`bot.settings.SettingsError` when the private key file cannot be read.
    """
    from bot.github.pygithub import GitHubClients, NoRepositoryPort

    configs = configs if configs is not None else RepoConfigs()
    token = settings.token.get_secret_value() if settings.token is not None else None
    clients = GitHubClients(
        base_url=settings.github_api_url, bot_login=settings.bot_login,
        app_id=settings.app_id, private_key_pem=settings.private_key_pem(), token=token,
        throttle=settings.github_throttle if throttle is None else throttle, retry=retry,
        metrics=metrics,
    )

    def context(event: Event) -> tuple[Any, Any]:
        if not event.repo_full_name:
            return NoRepositoryPort(settings.bot_login), None
        port = clients.port(event.repo_full_name, event.installation_id)
        return port, configs.load(port).config

    return context


def replica(engine: Engine, serve_pid: int) -> str | None:
    """The name the worker claims deliveries under: on PostgreSQL, where several ``serve``
    replicas may share the database, :func:`bot.database.replica_name` of the ``serve``
    process; None on SQLite (one process uses the database; it requeues every unfinished
    delivery at start)."""
    if engine.dialect.name != "postgresql":
        return None
    return database.replica_name(serve_pid)


def inbox_jobs(settings: Settings, engine: Engine) -> list[Job]:
    """The inbox's own periodic jobs: ``recover-missed-deliveries``
    (:func:`bot.inbox.recovery.recover_missed`) every ``redeliver_interval_s`` seconds, when
    App credentials are set (the App's webhook log needs App JWT auth) and the interval is
    not 0.  Raises :class:`bot.settings.SettingsError` when the key file cannot be read."""
    key = settings.private_key_pem()
    if not settings.app_id or not key or settings.redeliver_interval_s <= 0:
        return []
    from bot.github.app_webhook import AppWebhookLog
    from bot.inbox.recovery import recover_missed

    hooks = AppWebhookLog(base_url=settings.github_api_url, app_id=settings.app_id,
                          private_key=key, throttle=settings.github_throttle)

    def run() -> None:
        rep = recover_missed(engine, hooks, window_s=settings.redeliver_window_s,
                             max_requests=settings.redeliver_max_per_run,
                             max_pages=settings.redeliver_max_pages)
        if rep.outcomes or rep.stopped:
            log.info("missed deliveries: %d log pages read%s, %d failed, %d missing, asked "
                     "%s%s", rep.pages, " (resumed)" if rep.resumed else "", rep.failed,
                     rep.missing, rep.outcomes or "none",
                     f" (stopped: {rep.stopped})" if rep.stopped else "")

    return [Job("recover-missed-deliveries", settings.redeliver_interval_s, run,
                "ask GitHub to redeliver webhook deliveries that failed and are not stored")]

def git_mirrors(settings: Settings) -> GitMirrors:
    """The bare mirrors of ``settings.git``, committing as the bot's login."""
    login = settings.bot_login
    return GitMirrors(settings.git.cache_dir, timeout_s=settings.git.timeout_s,
                      max_campaign_bytes=settings.git.max_campaign_bytes,
                      identity=(login, f"{login}@users.noreply.github.com"))


def compose(settings: Settings, engine: Engine, *, context: ContextFactory | None = None,
            metrics: Metrics | None = None) -> Registry:
    """Every feature's handlers, commands and jobs, on ``engine`` and the GitHub factory
    ``context`` (default :func:`github_context`).  Raises :class:`ExtraHandlersError`."""
    configs = RepoConfigs()
    if context is None:
        context = github_context(settings, configs=configs, metrics=metrics)
    app = Registry(engine=engine, context=context, configs=configs, bot_login=settings.bot_login,
                   git=git_mirrors(settings), public_url=settings.public_url,
                   web_url=settings.github_url)
    config.register(app)
    help.register(app)
    review.register(app)
    screen.register(app, settings.screen)
    header.register(app, queue=campaign_state)
    notify.register(app, settings.notify)
    for register in extra_features(settings.extra_handler_modules):
        register(app)
    if metrics is not None:  # a series per subscribed event from the start, at 0
        metrics.init_series(app.router.subscriptions())
    return app


def app_manifest(settings: Settings, url: str, *, name: str | None = None,
                 public: bool = False) -> dict[str, Any]:
    """The GitHub App manifest for this bot served at ``url``: the events the composed
    features' handlers subscribe to and the permissions the GitHub port's calls need
    (:func:`bot.manifest.build_manifest`).  Composes the features on a throw-away in-memory
    database (nothing is read or written).  Raises :class:`bot.manifest.ManifestError`."""
    from bot.manifest import DEFAULT_APP_NAME, build_manifest

    engine = database.make_engine("sqlite://", sqlite_synchronous="NORMAL")
    try:
        def no_github(event: Event) -> tuple[Any, Any]:
            raise RuntimeError("the manifest needs no GitHub access")

        bot = compose(settings, engine, context=no_github)
        return build_manifest(url, bot.router.subscriptions(), name=name or DEFAULT_APP_NAME,
                              public=public)
    finally:
        engine.dispose()


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    context_factory: ContextFactory | None = None,
    run_worker: bool | None = None,
    metrics: Metrics | None = None,
    router: Router | None = None,
    poll_interval: float = 1.0,
    setup_token: str | None = None,
) -> FastAPI:
    """The application for ``settings``.

    ``engine`` defaults to one for ``settings.database_url``; ``context_factory`` to
    :func:`github_context`; ``router`` (tests) replaces the composed features' handlers and
    jobs.  On start-up it runs the migrations, starts the inbox writer and (unless
    ``run_worker`` is False) the worker: a child process (``worker_mode="process"``, which
    composes the features itself) or a thread of this process with the features and their
    one scheduler.  On shutdown it stops them, leaving unfinished deliveries for the next
    start.

    Without a webhook secret the service starts in setup mode when ``setup_token`` is given
    (:mod:`bot.setup`: ``/setup?token=...`` creates the GitHub App, ``/webhook`` answers 503
    until then, and the worker starts once the App's credentials are stored); otherwise it
    raises :class:`bot.settings.SettingsError`.  Setup mode needs ``settings.public_url``.
    """
    if run_worker is None:
        run_worker = settings.run_worker
    mode = settings.worker_mode
    if mode == "process" and (context_factory is not None or router is not None):
        raise ValueError("worker_mode 'process' composes its handlers and GitHub context from "
                         "the settings; pass worker_mode='thread' to inject them")
    configured = settings.webhook_secret is not None
    if not configured and setup_token is None:
        settings.secret()  # raises SettingsError naming the variable
    if not configured and not settings.public_url:
        raise SettingsError(f"{ENV_PREFIX}PUBLIC_URL is not set: the App setup needs the "
                            "https URL GitHub reaches this service at")
    metrics = metrics if metrics is not None else Metrics()
    state: dict[str, Any] = {"settings": settings,
                             "secret": settings.secret() if configured else None}

    async def start_worker(current: Settings) -> None:
        """The worker (and, in thread mode, the features' scheduler) on ``current``."""
        eng = state["engine"]
        worker: Worker | WorkerProcess
        if mode == "process":
            worker = WorkerProcess(WORKER_MODULE, dump_settings(current),
                                   on_exit=metrics.process_gone)
        else:
            context = context_factory or github_context(current, metrics=metrics)
            if router is None:
                bot = compose(current, eng, context=context, metrics=metrics)
                handlers, jobs = bot.router, bot.jobs
            else:
                handlers, jobs = router, []
            # scheduled jobs run on one replica: the advisory-lock leader (always this
            # process on SQLite)
            jobs = [*jobs, *inbox_jobs(current, eng)]
            leader = database.JobLeader(eng)
            state["leader"] = leader
            state["scheduler"] = start_scheduler(jobs, leader) if jobs else None
            worker = Worker(
                eng, context, concurrency=current.worker_concurrency,
                max_attempts=current.max_attempts, retry_delays=current.retry_delay_seconds,
                metrics=metrics, router=handlers, poll_interval=poll_interval,
                replica=replica(eng, os.getpid()), lease_s=current.lease_s,
            )
        state["writer"].on_commit = worker.wake
        if isinstance(worker, WorkerProcess):
            worker.start()
            worker.wake()
            state["supervisor"] = asyncio.create_task(worker.supervise())
        else:
            worker.start_thread()
        state["worker"] = worker

    async def configured_as(app_: Any) -> None:
        """The setup page stored an App: continue as it, without a restart."""
        current = state["settings"].model_copy(update={
            "app_id": app_.app_id, "private_key": SecretStr(app_.private_key),
            "webhook_secret": SecretStr(app_.webhook_secret), "bot_login": app_.bot_login})
        if app_.client_id and app_.client_secret and current.github_client_id is None:
            current = current.model_copy(update={
                "github_client_id": app_.client_id,
                "github_client_secret": SecretStr(app_.client_secret)})
            try:
                state["dashboard"].signin = signin_for(current)
            except SettingsError as exc:
                log.warning("live pages: sign-in not enabled: %s", exc)
        state["settings"] = current
        state["secret"] = current.secret()
        if run_worker and state.get("worker") is None:
            await start_worker(current)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # the database
        eng = engine or database.make_engine(settings.database_url,
                                             sqlite_synchronous=settings.sqlite_synchronous)
        await asyncio.to_thread(database.migrate, eng)
        # the inbox: deliveries stored, then the worker woken
        writer = InboxWriter(eng, on_commit=None,
                             inline=settings.sqlite_synchronous == "NORMAL")
        writer.start()
        checkpointer = Checkpointer(eng) if eng.dialect.name == "sqlite" else None
        if checkpointer is not None:
            checkpointer.start()
        state.update(engine=eng, writer=writer, worker=None, scheduler=None, leader=None,
                     supervisor=None)
        # the worker: here (GitHub port factory -> features -> one scheduler), or a child
        # process that composes the same from the settings it is handed; in setup mode it
        # starts once the App exists
        if run_worker and state["secret"] is not None:
            await start_worker(settings)
        # out of file descriptors, asyncio logs every retried accept() with a traceback
        restore_handler = install_accept_error_handler(asyncio.get_running_loop())
        if state["secret"] is not None and not github_configured(settings):
            log.warning("no GitHub credentials: deliveries are stored but not handled (each "
                        "fails once, not retried) until CAMPAIGN_BOT_APP_ID with "
                        "CAMPAIGN_BOT_PRIVATE_KEY (or CAMPAIGN_BOT_PRIVATE_KEY_FILE), or "
                        "CAMPAIGN_BOT_TOKEN, is set; then `campaign-bot deliveries --export "
                        "ID > d.json && campaign-bot replay --apply d.json` handles a stored "
                        "one")
        log.info("campaign-bot ready (database %s)%s",
                 eng.url.render_as_string(hide_password=True),
                 "" if state["secret"] is not None else ": waiting for the App setup")
        try:
            yield
        finally:
            restore_handler()
            if state.get("scheduler") is not None:
                state["scheduler"].shutdown(wait=False)
            if state.get("leader") is not None:
                state["leader"].close()
            writer.stop()
            if checkpointer is not None:
                checkpointer.stop()
            if state.get("supervisor") is not None:
                state["supervisor"].cancel()
            w = state.get("worker")
            if isinstance(w, WorkerProcess):
                await w.stop()
            elif w is not None:
                await asyncio.to_thread(w.stop)

    def problems() -> list[str]:
        out = []
        try:
            with state["engine"].connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as exc:  # noqa: BLE001
            out.append(f"database: {type(exc).__name__}")
        if not state["writer"].alive:
            out.append("inbox writer: not running")
        w = state.get("worker")
        if run_worker and state["secret"] is not None and (w is None or not w.alive):
            out.append("worker: not running")
        return out

    async def submit(row: store.NewDelivery) -> bool:
        inserted: bool = await state["writer"].submit(row)
        return inserted

    app = FastAPI(title="campaign-bot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.bot = state
    # every response: CSP, nosniff, no framing (bot/security_headers.py)
    app.add_middleware(SecurityHeaders, github_url=settings.github_url)
    # every request: its body within a deadline, all bodies in flight within a budget
    app.add_middleware(BodyLimits, timeout_s=settings.body_timeout_s,
                       max_inflight_bytes=settings.max_inflight_body_bytes,
                       on_refused=metrics.inc_rejected)
    add_routes(app, Inbox(
        secret=state["secret"] or b"", max_body=settings.max_body_bytes, submit=submit,
        metrics=metrics, problems=problems,
        queue_counts=lambda: store.status_counts(state["engine"]),
        secret_source=lambda: state["secret"],
        redelivery_counts=lambda: recovery.redelivery_counts(state["engine"]),
        pool_queues=lambda: screen_queues.pool_waits(state["engine"]),
    ))
    if not configured:
        from bot.setup import SetupFlow, add_setup_routes

        assert setup_token is not None and settings.public_url
        flow = SetupFlow(token=setup_token,
                         manifest=app_manifest(settings, settings.public_url),
                         github_url=settings.github_url, api_url=settings.github_api_url,
                         credentials_file=settings.credentials_file, on_configured=configured_as,
                         secure_cookie=settings.public_url.startswith("https://"))
        state["setup"] = flow
        add_setup_routes(app, flow)
    dashboard = live_dashboard(settings, lambda: state["engine"], metrics=metrics)
    state["dashboard"] = dashboard
    live.add_routes(app, dashboard)
    app.include_router(dashboard_api.Api(dashboard).router())  # read-only JSON, /api/v1
    return app


def offline_context(settings: Settings, configs: RepoConfigs) -> ContextFactory:
    """A per-event factory of :class:`bot.github.offline.OfflineGitHub` ports (reads answered
    from the event's own payload, no network) and the repository config read through them
    (the defaults: the payload carries no files)."""
    from bot.github.offline import OfflineGitHub

    def context(event: Event) -> tuple[Any, Any]:
        port = OfflineGitHub(event.payload, event.repo_full_name or "", settings.bot_login)
        return port, configs.load(port).config

    return context


def live_dashboard(settings: Settings, engine: Callable[[], Engine], *,
                   metrics: Metrics | None = None,
                   load_campaign_dir: live.LoadCampaignDir | None = None) -> live.LiveDashboard:
    """The live campaign pages (``/c/OWNER/REPO/CAMPAIGN/``) on the bot's database and the
    GitHub port factory: evidence from ``load_campaign_dir`` (default: the repositories' bare
    git mirrors of ``settings.git``, as the review reads them, written out per tree SHA in a
    temporary folder removed at exit), repository visibility from
    ``GET /repos/{owner}/{repo}`` with the App's (or token's) credentials."""
    from bot.github import GitHubError, GitHubNotFound
    from bot.github.client import map_exception
    from bot.github.pygithub import GitHubClients

    token = settings.token.get_secret_value() if settings.token is not None else None
    clients = GitHubClients(
        base_url=settings.github_api_url, bot_login=settings.bot_login,
        app_id=settings.app_id, private_key_pem=settings.private_key_pem(), token=token,
        throttle=settings.github_throttle, metrics=metrics)

    def repo_private(owner: str, repo: str) -> bool | None:
        full = f"{owner}/{repo}"
        try:
            port = clients.port(full)
        except GitHubNotFound:
            return None  # no such repository, or the App is not installed on it
        except GitHubError:
            if not clients.configured:
                return None
            raise
        try:
            return bool(port.client.get_repo(full).private)
        except Exception as exc:  # noqa: BLE001 - translated
            err = map_exception(exc, f"repository {full}")
            if isinstance(err, GitHubNotFound):
                return None
            raise err from exc

    if load_campaign_dir is None:
        cache = tempfile.TemporaryDirectory(prefix="campaign-bot-evidence-")
        load_campaign_dir = live.GitCampaignDirs(engine, clients.port, git_mirrors(settings),
                                                 Path(cache.name), keep=cache)
    return live.LiveDashboard(engine, load_campaign_dir, repo_private,
                              signin=signin_for(settings))


def signin_for(settings: Settings) -> SignIn | None:
    """GitHub sign-in for the live pages of private repositories, or None when the App's
    client id and secret are not set.  Raises :class:`bot.settings.SettingsError` naming the
    variable when the configuration is incomplete (one of the pair, no public URL)."""
    from bot.features.dashboard.signin import SignInError, make_config

    secret = settings.github_client_secret
    session = settings.session_secret
    try:
        config = make_config(
            client_id=settings.github_client_id,
            client_secret=secret.get_secret_value() if secret is not None else None,
            github_url=settings.github_url, api_url=settings.github_api_url,
            public_url=settings.public_url,
            session_secret=session.get_secret_value() if session is not None else None)
    except SignInError as exc:
        raise SettingsError(str(exc)) from None
    return SignIn(config) if config is not None else None



def replay(saved: SavedDelivery, settings: Settings, *, apply: bool = False,
           resign: bool = False, offline: bool = False) -> ReplayReport:
    """``campaign-bot replay``: check ``saved``'s signature, then run the composed features'
    handlers on it.  A dry run records the GitHub writes instead of making them and runs on a
    scratch database (what the bot stores is not changed); ``apply`` makes the writes and uses
    the configured database.

    A dry run reads from GitHub when credentials are configured; with ``offline``, without
    credentials, or when GitHub cannot be reached, reads are answered from the delivery's
    payload (:func:`offline_context`).

    Raises :class:`bot.inbox.replay.SignatureMismatch` and
    :class:`bot.inbox.replay.ReplayInputError` (see there; ``--apply`` with ``offline`` or
    without GitHub access)."""
    from bot.github.client import make_retry

    event = replay_mod.check(saved, settings.secret(), resign=resign)
    has_credentials = settings.token is not None or settings.app_id is not None
    if apply and offline:
        raise replay_mod.ReplayInputError("--apply makes the GitHub writes: it cannot be "
                                          "combined with --offline")
    reason = None
    if offline:
        reason = "--offline: reads answer from the delivery's payload; no GitHub request"
    elif not has_credentials:
        reason = ("no GitHub credentials configured (CAMPAIGN_BOT_TOKEN, or CAMPAIGN_BOT_APP_ID "
                  "with a private key): reads answer from the delivery's payload, as with "
                  "--offline")
    with contextlib.ExitStack() as stack:
        if apply:
            url = settings.database_url
        else:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="campaign-bot-"))
            url = f"sqlite:///{scratch}/replay.sqlite3"
        engine = database.make_engine(url, sqlite_synchronous="NORMAL")
        stack.callback(engine.dispose)
        database.migrate(engine)
        configs = RepoConfigs()
        # one quick retry: an operator waits at the terminal (the service retries 4 times)
        context = (github_context(settings, configs=configs,
                                  retry=make_retry(total=1, backoff_factor=0.5))
                   if has_credentials or apply else offline_context(settings, configs))
        bot = compose(settings, engine, context=context)
        return replay_mod.replay(event, bot.router, bot.context, apply=apply,
                           offline=offline_context(settings, RepoConfigs()),
                           offline_reason=reason)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack re-raises


def worker_main(argv: list[str] | None = None) -> int:
    """The worker process: ``python -m bot.worker_process --wake-fd N --settings-fd M``
    (started by :class:`bot.inbox.worker_process.WorkerProcess`)."""
    ap = argparse.ArgumentParser(prog="campaign-bot-worker")
    ap.add_argument("--wake-fd", type=int, required=True)
    ap.add_argument("--settings-fd", type=int, required=True)
    a = ap.parse_args(argv)
    die_with_parent()
    try:
        settings = restore_settings(read_settings_fd(a.settings_fd))
    except (ValueError, SettingsError) as exc:
        from evidence.console import print_error

        print_error(f"settings from the parent process: {exc}")
        return 2
    configure_logging(settings, "%(asctime)s %(levelname)s %(name)s [worker]: %(message)s")
    # The worker's own commits (claims, done marks) need not survive a power loss: losing
    # one means re-processing a delivery, never losing it; only the inbox insert is FULL.
    engine = database.make_engine(settings.database_url, sqlite_synchronous="NORMAL")
    metrics = Metrics()
    bot = compose(settings, engine, metrics=metrics)
    leader = database.JobLeader(engine)
    scheduler = start_scheduler([*bot.jobs, *inbox_jobs(settings, engine)], leader)
    worker = Worker(
        engine, bot.context, router=bot.router, concurrency=settings.worker_concurrency,
        max_attempts=settings.max_attempts, retry_delays=settings.retry_delay_seconds,
        metrics=metrics, replica=replica(engine, os.getppid()), lease_s=settings.lease_s,
    )
    try:
        asyncio.run(run_child(worker, a.wake_fd))
    finally:
        scheduler.shutdown(wait=False)
        leader.close()
    return 0
