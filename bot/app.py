"""The FastAPI application: ``POST /webhook``, ``GET /healthz``, ``GET /metrics``.

``POST /webhook`` is thin and fails closed (DESIGN.md style rule 3), in this order:

1. no ``X-Hub-Signature-256`` → 401;
2. ``Content-Length`` above ``max_body_bytes`` → 413 without reading; the body is then read
   in chunks and a stream that passes the limit → 413 (chunked bodies have no length);
3. signature not valid for the raw bytes (``hmac.compare_digest``) → 401;
4. no ``X-GitHub-Event`` or ``X-GitHub-Delivery`` → 400;
5. ``ping`` → 200 ``{"ok": true, "zen": ...}`` (not stored);
6. body not a JSON object (or form without ``payload``) → 400, **not stored**: GitHub never
   sends that, so a signed malformed body means a broken sender; storing it would only park a
   delivery no attempt can process;
7. store (id, event, headers, body, received time) → 202 ``{"status": "queued"}``; a
   delivery id already stored → 200 ``{"status": "duplicate"}`` and it is not processed again.

The worker runs as a child process by default (``bot.worker_process``; see there why), or
on a thread of this process (``worker_mode="thread"``, used by the in-process tests).

The store write goes through one writer thread that commits whatever arrived together in one
transaction (group commit), so the event loop never waits on the disk and one fsync serves
many deliveries under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from sqlalchemy import text
from sqlalchemy.engine import Engine

from bot import store
from bot.metrics import Metrics
from bot.metrics import metrics as default_metrics
from bot.router import Router
from bot.router import router as default_router
from bot.settings import Settings
from bot.webhook import (
    DELIVERY_HEADER,
    DROPPED_HEADERS,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    PayloadError,
    delivery_key,
    parse_payload,
    repo_of,
    verify_signature,
)
from bot.worker import ContextFactory, Worker, default_context_factory, load_handlers

log = logging.getLogger(__name__)

PING_ZEN = "Speak like a human."
WRITER_BATCH = 256


class InboxWriter:
    """One thread that inserts deliveries, batching whatever is queued into one commit.

    :meth:`submit` returns True when the row was inserted, False for a duplicate
    ``delivery_id``; it raises the database error if the commit failed (nothing acknowledged).
    ``on_commit`` is called on the writer thread after each successful commit.
    """

    def __init__(self, engine: Engine, on_commit: Any = None) -> None:
        self.engine = engine
        self.on_commit = on_commit
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="campaign-bot-inbox", daemon=True)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True while the writer thread runs."""
        return self._thread.is_alive()

    def stop(self) -> None:
        """Finish queued inserts, then stop."""
        self._q.put(None)
        self._thread.join(30)

    async def submit(self, row: store.NewDelivery) -> bool:
        """Store ``row``; see the class docstring."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._q.put((row, fut, loop))
        return await fut

    def _run(self) -> None:
        raw = None
        if self.engine.dialect.name == "sqlite":
            raw = self.engine.raw_connection()  # one writer connection, no ORM overhead
            # An automatic checkpoint would run inside some acknowledgement's commit (copying
            # the WAL into the database and fsyncing it: tens of ms); the Checkpointer thread
            # does it instead, off the acknowledgement path.
            raw.execute("PRAGMA wal_autocheckpoint=0")
        try:
            self._loop_batches(raw)
        finally:
            if raw is not None:
                raw.close()

    def _commit(self, raw: Any, rows: list[store.NewDelivery]) -> Sequence[bool]:
        if raw is None:
            with self.engine.begin() as conn:
                return store.insert_deliveries(conn, rows)
        try:
            res = store.insert_deliveries_sqlite(raw, rows)
            raw.commit()
            return res
        except BaseException:
            raw.rollback()
            raise

    def _loop_batches(self, raw: Any) -> None:
        stop = False
        while not stop:
            item = self._q.get()
            if item is None:
                break
            batch = [item]
            while len(batch) < WRITER_BATCH:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            try:
                results: Sequence[bool | BaseException] = self._commit(raw, [b[0] for b in batch])
            except Exception as exc:  # noqa: BLE001 - reported to every waiting request
                log.exception("could not store %d deliveries", len(batch))
                results = [exc] * len(batch)
            else:
                if self.on_commit is not None:
                    self.on_commit()
            for (_row, fut, loop), res in zip(batch, results, strict=True):
                loop.call_soon_threadsafe(_resolve, fut, res)


class WorkerProcess:
    """The worker as a child process (``python -m bot.worker_process``), supervised: if it
    dies it is started again (its unfinished deliveries are requeued by the new one).

    :meth:`wake` is thread-safe and never blocks; :attr:`snapshot` holds the child's latest
    counters for ``GET /metrics``."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.snapshot: dict[str, Any] = {}
        self._wake_w: int | None = None
        self._report_r: int | None = None
        self._buf = b""
        self.restarts = 0

    def start(self) -> None:
        """Spawn the child with a wake pipe and a report pipe."""
        import subprocess
        import sys

        wake_r, wake_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot.worker_process", "--wake-fd", str(wake_r),
             "--report-fd", str(rep_w)],
            pass_fds=(wake_r, rep_w),
        )
        os.close(wake_r)
        os.close(rep_w)
        os.set_blocking(wake_w, False)
        os.set_blocking(rep_r, False)
        self._wake_w, self._report_r = wake_w, rep_r
        asyncio.get_running_loop().add_reader(rep_r, self._on_report)

    @property
    def alive(self) -> bool:
        """True while the child runs."""
        return self.proc is not None and self.proc.poll() is None

    def wake(self) -> None:
        """Tell the child new deliveries are stored."""
        fd = self._wake_w
        if fd is None:
            return
        try:
            os.write(fd, b"w")
        except (BlockingIOError, BrokenPipeError, OSError):
            pass  # pipe full (the child is awake anyway) or child gone (supervisor restarts)

    def _on_report(self) -> None:
        fd = self._report_r
        try:
            data = os.read(fd, 65536) if fd is not None else b""
        except BlockingIOError:
            return
        if not data:
            self._close_report()
            return
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        if lines:
            try:
                self.snapshot = json.loads(lines[-1])
            except ValueError:
                pass

    def _close_report(self) -> None:
        if self._report_r is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._report_r)
            os.close(self._report_r)
            self._report_r = None

    def _close(self) -> None:
        self._close_report()
        if self._wake_w is not None:
            os.close(self._wake_w)
            self._wake_w = None

    async def supervise(self) -> None:
        """Restart the child whenever it exits (until cancelled)."""
        while True:
            await asyncio.sleep(1.0)
            if self.proc is not None and self.proc.poll() is not None:
                log.error("worker process exited with %s; starting a new one",
                          self.proc.returncode)
                self._close()
                self.restarts += 1
                self.start()
                self.wake()

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the child and wait (it finishes running handlers for up to ``grace``)."""
        import signal
        import subprocess

        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, grace + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self._close()


class Checkpointer:
    """SQLite only: a thread that runs ``PRAGMA wal_checkpoint(PASSIVE)`` every ``interval``
    seconds on its own connection (PASSIVE never blocks the inbox writer), because the
    writer's automatic checkpoints are off."""

    def __init__(self, engine: Engine, interval: float = 1.0) -> None:
        self.engine = engine
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="campaign-bot-checkpoint",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self) -> None:
        """Run a last checkpoint and stop."""
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while True:
            stopping = self._stop.wait(self.interval)
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("WAL checkpoint failed")
            if stopping:
                return


def _resolve(fut: asyncio.Future[bool], res: bool | BaseException) -> None:
    if fut.done():
        return
    if isinstance(res, BaseException):
        fut.set_exception(res)
    else:
        fut.set_result(res)


def _reject(reason: str, status: int, detail: str, m: Metrics, delivery: str | None) -> Response:
    m.inc_rejected(reason)
    log.warning("webhook rejected (%s, delivery %s): %s", status, delivery or "-", detail)
    return JSONResponse({"error": detail}, status_code=status)


def create_app(
    settings: Settings,
    *,
    engine: Engine | None = None,
    context_factory: ContextFactory | None = None,
    run_worker: bool | None = None,
    metrics: Metrics = default_metrics,
    router: Router = default_router,
    poll_interval: float = 1.0,
) -> FastAPI:
    """The application for ``settings``.

    ``engine`` defaults to one for ``settings.database_url``; ``context_factory`` to
    :func:`bot.worker.default_context_factory`; ``router`` to ``bot.router.router``.  On
    start-up it runs the migrations, imports the handler modules, starts the inbox writer and
    (unless ``run_worker`` is False) the worker thread; on shutdown it stops them, leaving
    unfinished deliveries for the next start.
    """
    if run_worker is None:
        run_worker = settings.run_worker
    mode = settings.worker_mode
    if mode == "process" and (context_factory is not None or router is not default_router):
        raise ValueError("worker_mode 'process' reads its handlers and GitHub context from the "
                         "settings; pass worker_mode='thread' to inject them")
    secret = settings.webhook_secret.get_secret_value().encode()
    max_body = settings.max_body_bytes
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        eng = engine or store.make_engine(settings.database_url,
                                          sqlite_synchronous=settings.sqlite_synchronous)
        await asyncio.to_thread(store.migrate, eng)
        loaded = load_handlers(settings.extra_handler_modules)
        scheduler = None
        if run_worker and "bot.campaign_status" in loaded:
            # issue 8: the status header's service on this database, and its 30-minute job
            from bot import campaign_status

            campaign_status.configure(
                campaign_status.HeaderService(eng, bot_login=settings.bot_login))
            try:
                scheduler = campaign_status.start_scheduler(
                    eng, context_factory or default_context_factory(settings),
                    settings.bot_login)
            except Exception as exc:  # noqa: BLE001 - no GitHub credentials: no safety net
                log.warning("status header scheduler not started: %s", exc)
        worker: Worker | WorkerProcess | None = None
        supervisor = None
        if run_worker and mode == "process":
            worker = WorkerProcess()
        elif run_worker:
            worker = Worker(
                eng, context_factory or default_context_factory(settings),
                concurrency=settings.worker_concurrency, max_attempts=settings.max_attempts,
                retry_delays=settings.retry_delay_seconds, metrics=metrics, router=router,
                poll_interval=poll_interval,
            )
        writer = InboxWriter(eng, on_commit=worker.wake if worker else None)
        writer.start()
        checkpointer = Checkpointer(eng) if eng.dialect.name == "sqlite" else None
        if checkpointer is not None:
            checkpointer.start()
        if isinstance(worker, WorkerProcess):
            worker.start()
            worker.wake()
            supervisor = asyncio.create_task(worker.supervise())
        elif worker is not None:
            worker.start_thread()
        # the /screen flow (issue 7): its runtime and watchdog jobs live where the handlers
        # run (the worker child process starts its own, see bot.worker_process)
        screens_svc = None
        if "bot.screen" in sys.modules and not isinstance(worker, WorkerProcess):
            from bot import screen_service

            screens_svc = screen_service.start(
                eng, worker.context_factory if isinstance(worker, Worker) else None,
                scheduler=isinstance(worker, Worker))
        state.update(engine=eng, writer=writer, worker=worker, scheduler=scheduler)
        log.info("campaign-bot ready (database %s)", eng.url.render_as_string(hide_password=True))
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            if screens_svc is not None:
                screens_svc.stop()
            writer.stop()
            if checkpointer is not None:
                checkpointer.stop()
            if supervisor is not None:
                supervisor.cancel()
            if isinstance(worker, WorkerProcess):
                await worker.stop()
            elif worker is not None:
                await asyncio.to_thread(worker.stop)

    app = FastAPI(title="campaign-bot", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.bot = state

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        h = request.headers
        delivery = h.get(DELIVERY_HEADER)
        sig = h.get(SIGNATURE_HEADER)
        if not sig:
            return _reject("signature", 401, "missing X-Hub-Signature-256", metrics, delivery)
        cl = h.get("content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return _reject("bad_request", 400, "bad Content-Length", metrics, delivery)
            if n > max_body:
                return _reject("too_large", 413, f"body of {n} bytes exceeds {max_body}",
                               metrics, delivery)
        chunks = bytearray()
        async for chunk in request.stream():
            chunks += chunk
            if len(chunks) > max_body:
                return _reject("too_large", 413, f"body exceeds {max_body} bytes", metrics,
                               delivery)
        body = bytes(chunks)
        if not verify_signature(secret, body, sig):
            return _reject("signature", 401, "signature does not match the body", metrics,
                           delivery)
        event = h.get(EVENT_HEADER)
        if not event or not delivery:
            return _reject("bad_request", 400,
                           "missing X-GitHub-Event or X-GitHub-Delivery", metrics, delivery)
        if event == "ping":
            return JSONResponse({"ok": True, "zen": PING_ZEN})
        try:
            payload = parse_payload(body, h.get("content-type"))
        except PayloadError as exc:
            return _reject("malformed", 400, str(exc), metrics, delivery)
        action = payload.get("action")
        row = store.NewDelivery(
            delivery_id=delivery[:200],
            event=event[:100],
            action=action[:100] if isinstance(action, str) else None,
            repo=repo_of(payload),
            key=delivery_key(payload),
            headers={k: v for k, v in h.items() if k not in DROPPED_HEADERS},
            body=body,
            received_at=store.utcnow(),
        )
        try:
            inserted = await state["writer"].submit(row)
        except Exception:  # noqa: BLE001 - not stored, so not acknowledged: GitHub shows it failed
            return JSONResponse({"error": "could not store the delivery"}, status_code=503)
        if not inserted:
            metrics.inc_duplicate()
            return JSONResponse({"status": "duplicate", "delivery": delivery}, status_code=200)
        metrics.inc_received(event)
        return JSONResponse({"status": "queued", "delivery": delivery}, status_code=202)

    @app.get("/healthz")
    async def healthz() -> Response:
        problems = []
        try:
            await asyncio.to_thread(_db_ping, state["engine"])
        except Exception as exc:  # noqa: BLE001
            problems.append(f"database: {type(exc).__name__}")
        if not state["writer"].alive:
            problems.append("inbox writer: not running")
        w: Worker | WorkerProcess | None = state.get("worker")
        if run_worker and (w is None or not w.alive):
            problems.append("worker: not running")
        if problems:
            return JSONResponse({"status": "unhealthy", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        counts = await asyncio.to_thread(store.status_counts, state["engine"])
        w = state.get("worker")
        others = [w.snapshot] if isinstance(w, WorkerProcess) and w.snapshot else []
        return PlainTextResponse(metrics.render(counts, others),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    return app


def _db_ping(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
