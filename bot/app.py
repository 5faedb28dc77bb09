"""The composition root: the one place that builds the service from its parts.

    settings ─► database ─► GitHub port factory ─► features ─► one scheduler ─► FastAPI app

* :func:`create_app` reads as that line: the web app of ``campaign-bot serve`` (inbox writer,
  ``/webhook``, ``/healthz``, ``/metrics``) and, where the handlers run, the worker with the
  composed features and their jobs on one scheduler.
* :func:`compose` adds the features to a :class:`bot.registry.Registry`, explicitly and in a
  fixed order (the order their handlers run for one event): config, help, review, screen,
  header, then the modules named by ``CAMPAIGN_BOT_EXTRA_HANDLERS``.  Features never import
  each other; the one thing one feature tells another (the screen queue shown in the status
  header) is wired here.
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
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.engine import Engine

from bot import database
from bot.features import config, header, help, review, screen
from bot.features.screen.campaign_state import campaign_state
from bot.github.git import GitMirrors
from bot.inbox import replay as replay_mod
from bot.inbox import store
from bot.inbox.endpoint import Inbox, add_routes
from bot.inbox.replay import ReplayReport, SavedDelivery
from bot.inbox.router import Event, Router
from bot.inbox.worker import ContextFactory, Worker
from bot.inbox.worker_process import WorkerProcess, die_with_parent, read_settings_fd, run_child
from bot.inbox.writer import Checkpointer, InboxWriter
from bot.metrics import Metrics
from bot.registry import Registry
from bot.repo_config import RepoConfigs
from bot.scheduler import start_scheduler
from bot.settings import Settings, SettingsError, dump_settings, restore_settings

log = logging.getLogger(__name__)

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

    async def context(event: Event) -> tuple[Any, Any]:
        if not event.repo_full_name:
            return NoRepositoryPort(settings.bot_login), None
        port = await asyncio.to_thread(clients.port, event.repo_full_name,
                                       event.installation_id)
        return port, (await configs.load(port)).config

    return context


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
                   git=git_mirrors(settings))
    config.register(app)
    help.register(app)
    review.register(app)
    screen.register(app, settings.screen)
    header.register(app, queue=campaign_state)
    for register in extra_features(settings.extra_handler_modules):
        register(app)
    return app


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    context_factory: ContextFactory | None = None,
    run_worker: bool | None = None,
    metrics: Metrics | None = None,
    router: Router | None = None,
    poll_interval: float = 1.0,
) -> FastAPI:
    """The application for ``settings``.

    ``engine`` defaults to one for ``settings.database_url``; ``context_factory`` to
    :func:`github_context`; ``router`` (tests) replaces the composed features' handlers and
    jobs.  On start-up it runs the migrations, starts the inbox writer and (unless
    ``run_worker`` is False) the worker: a child process (``worker_mode="process"``, which
    composes the features itself) or a thread of this process with the features and their
    one scheduler.  On shutdown it stops them, leaving unfinished deliveries for the next
    start.  Raises :class:`bot.settings.SettingsError` without a webhook secret.
    """
    if run_worker is None:
        run_worker = settings.run_worker
    mode = settings.worker_mode
    if mode == "process" and (context_factory is not None or router is not None):
        raise ValueError("worker_mode 'process' composes its handlers and GitHub context from "
                         "the settings; pass worker_mode='thread' to inject them")
    secret = settings.secret()
    metrics = metrics if metrics is not None else Metrics()
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # the database
        eng = engine or database.make_engine(settings.database_url,
                                             sqlite_synchronous=settings.sqlite_synchronous)
        await asyncio.to_thread(database.migrate, eng)
        # the worker: here (GitHub port factory -> features -> one scheduler), or a child
        # process that composes the same from the settings it is handed
        worker: Worker | WorkerProcess | None = None
        scheduler = None
        if run_worker and mode == "process":
            worker = WorkerProcess(WORKER_MODULE, dump_settings(settings),
                                   on_exit=metrics.process_gone)
        elif run_worker:
            context = context_factory or github_context(settings, metrics=metrics)
            if router is None:
                bot = compose(settings, eng, context=context, metrics=metrics)
                handlers, jobs = bot.router, bot.jobs
            else:
                handlers, jobs = router, []
            scheduler = start_scheduler(jobs) if jobs else None
            worker = Worker(
                eng, context, concurrency=settings.worker_concurrency,
                max_attempts=settings.max_attempts, retry_delays=settings.retry_delay_seconds,
                metrics=metrics, router=handlers, poll_interval=poll_interval,
            )
        # the inbox: deliveries stored, then the worker woken
        writer = InboxWriter(eng, on_commit=worker.wake if worker else None,
                             inline=settings.sqlite_synchronous == "NORMAL")
        writer.start()
        checkpointer = Checkpointer(eng) if eng.dialect.name == "sqlite" else None
        if checkpointer is not None:
            checkpointer.start()
        supervisor = None
        if isinstance(worker, WorkerProcess):
            worker.start()
            worker.wake()
            supervisor = asyncio.create_task(worker.supervise())
        elif worker is not None:
            worker.start_thread()
        state.update(engine=eng, writer=writer, worker=worker, scheduler=scheduler)
        log.info("campaign-bot ready (database %s)", eng.url.render_as_string(hide_password=True))
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            writer.stop()
            if checkpointer is not None:
                checkpointer.stop()
            if supervisor is not None:
                supervisor.cancel()
            if isinstance(worker, WorkerProcess):
                await worker.stop()
            elif worker is not None:
                await asyncio.to_thread(worker.stop)

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
        if run_worker and (w is None or not w.alive):
            out.append("worker: not running")
        return out

    async def submit(row: store.NewDelivery) -> bool:
        inserted: bool = await state["writer"].submit(row)
        return inserted

    app = FastAPI(title="campaign-bot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.bot = state
    add_routes(app, Inbox(
        secret=secret, max_body=settings.max_body_bytes, submit=submit, metrics=metrics,
        problems=problems, queue_counts=lambda: store.status_counts(state["engine"]),
    ))
    return app


async def replay(saved: SavedDelivery, settings: Settings, *, apply: bool = False,
                 resign: bool = False) -> ReplayReport:
    """``campaign-bot replay``: check ``saved``'s signature, then run the composed features'
    handlers on it.  A dry run records the GitHub writes instead of making them and runs on a
    scratch database (what the bot stores is not changed); ``apply`` makes the writes and uses
    the configured database.

    Raises :class:`bot.inbox.replay.SignatureMismatch` and
    :class:`bot.inbox.replay.ReplayInputError` (see there)."""
    event = replay_mod.check(saved, settings.secret(), resign=resign)
    with contextlib.ExitStack() as stack:
        if apply:
            url = settings.database_url
        else:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="campaign-bot-"))
            url = f"sqlite:///{scratch}/replay.sqlite3"
        engine = database.make_engine(url, sqlite_synchronous="NORMAL")
        stack.callback(engine.dispose)
        await asyncio.to_thread(database.migrate, engine)
        bot = compose(settings, engine)
        return await replay_mod.replay(event, bot.router, bot.context, apply=apply)
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
        print(f"error: settings from the parent process: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s [worker]: %(message)s")
    # The worker's own commits (claims, done marks) need not survive a power loss: losing
    # one means re-processing a delivery, never losing it; only the inbox insert is FULL.
    engine = database.make_engine(settings.database_url, sqlite_synchronous="NORMAL")
    metrics = Metrics(rate_limit_unknown=False)
    bot = compose(settings, engine, metrics=metrics)
    scheduler = start_scheduler(bot.jobs)
    worker = Worker(
        engine, bot.context, router=bot.router, concurrency=settings.worker_concurrency,
        max_attempts=settings.max_attempts, retry_delays=settings.retry_delay_seconds,
        metrics=metrics,
    )
    try:
        asyncio.run(run_child(worker, a.wake_fd))
    finally:
        scheduler.shutdown(wait=False)
    return 0
