"""The background worker: takes stored deliveries in order and dispatches them to handlers.

Guarantees:

* A delivery is marked ``done`` only after every matching handler finished.  Each handler's
  outcome is committed as it ends (``handler_runs``), so a retry or a restart runs only the
  handlers that have not yet finished ok on that delivery.
* After a crash or restart, deliveries left ``processing`` are queued again, so no accepted
  delivery is lost; one killed mid-handler runs that handler again.  A worker that uses the
  database alone (``replica`` None: the single-process SQLite default) requeues them all at
  start (:func:`bot.inbox.store.recover`).  One of several replicas (``replica`` set) claims
  each delivery with a lease of ``lease_s`` seconds that it renews every ``lease_s / 3``
  seconds while it works (:func:`bot.inbox.store.heartbeat`); any replica queues again the
  deliveries whose lease ran out (:func:`bot.inbox.store.reclaim_expired`: a replica killed
  with ``kill -9``), and a replica hands its own claims back at start and on a graceful stop
  (:func:`bot.inbox.store.release`).
* Deliveries with the same key (:func:`bot.inbox.delivery.delivery_key`: one per
  repository) run one at a time in arrival order, across replicas too (a delivery is never
  claimed while an earlier one of its key is queued or processing), so writes to one issue
  or PR are serialised; different keys run concurrently up to ``concurrency``.
* A failing handler never stops the others (``Router.dispatch``); the failure is logged with the
  delivery id and kept in the database.  The delivery is retried after ``retry_delays``
  (failed handlers only) until ``max_attempts``, then marked ``failed``
  (``campaign-bot deliveries --failed``).  A permanent failure
  (:func:`bot.inbox.router.permanent_reason`: GitHub's 404/410/422, a payload of the wrong
  shape, :func:`bot.inbox.payloads.check_shape`) is not retried: that handler is not run
  again, and the delivery ends ``failed`` with ``permanent: ...`` as its last error.  A
  delivery stopped only by GitHub's rate limits (:func:`bot.inbox.router.rate_limit_wait`)
  is queued again after GitHub's reset and its attempt given back: rate limits never use up
  ``max_attempts``.
* While a delivery waits out its retry delay, the later deliveries of its key run
  (:func:`bot.inbox.store.queue_heads`): one failing delivery delays the others of its
  installation by its own attempt at most, never by a retry delay.

The worker runs in its own process (``bot.inbox.worker_process``, the default) or on its own
thread, so slow handlers never delay the webhook acknowledgement on the server's loop.
Handlers, commands and jobs are synchronous (PyGithub, ``git`` and SQLAlchemy all block): the
worker's scheduler runs each on its handler thread pool, one delivery per key at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.engine import Engine

from bot.inbox import store
from bot.inbox.delivery import PayloadError, parse_payload
from bot.inbox.payloads import PayloadShapeError, check_shape
from bot.inbox.router import Event, Router, permanent_reason
from bot.metrics import Metrics

log = logging.getLogger(__name__)

ContextFactory = Callable[[Event], tuple[Any, Any]]
"""``def factory(event) -> (gh, config)`` (blocking): the GitHub port for the event's installation
or repository and its parsed repo config (or None); built by the composition root
(:func:`bot.app.github_context`)."""


def handler_name(fn: Any) -> str:
    """The name a handler is recorded under (same as ``Router.dispatch`` reports)."""
    return f"{fn.__module__}.{fn.__qualname__}"


def _utc(t: dt.datetime | None) -> dt.datetime | None:
    if t is not None and t.tzinfo is None:  # SQLite returns naive datetimes; we store UTC
        return t.replace(tzinfo=dt.UTC)
    return t


class Worker:
    """Processes the delivery inbox (see the module docstring).

    ``retry_delays`` are seconds before attempt 2, 3, ... (the last repeats);
    ``handler_timeout`` bounds one handler run in seconds (a timeout is a failure);
    ``poll_interval`` is how often the queue is re-read without a :meth:`wake`;
    ``coalesce`` is how long a :meth:`wake` waits for more deliveries before the queue is read
    (under load one read then serves many deliveries, leaving the CPU to acknowledgements).
    """

    def __init__(
        self,
        engine: Engine,
        context_factory: ContextFactory,
        *,
        router: Router,
        concurrency: int = 4,
        max_attempts: int = 3,
        retry_delays: Sequence[float] = (5.0, 60.0, 300.0),
        handler_timeout: float = 600.0,
        poll_interval: float = 1.0,
        coalesce: float = 0.05,
        metrics: Metrics | None = None,
        replica: str | None = None,
        lease_s: float = 60.0,
    ) -> None:
        self.engine = engine
        self.replica = replica
        self.lease_s = lease_s
        self._claimed: set[int] = set()
        self._missed: set[str] = set()
        self._maintained = 0.0
        self.context_factory = context_factory
        self.router = router
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.retry_delays = list(retry_delays) or [0.0]
        self.handler_timeout = handler_timeout
        self.poll_interval = poll_interval
        self.coalesce = coalesce
        self.metrics = metrics if metrics is not None else Metrics()
        self._urgent = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._thread: threading.Thread | None = None
        # Database calls get their own threads: handlers and other components that block the
        # default executor (PyGithub calls waiting out a rate limit) must not stall the queue.
        self._db_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency + 2, thread_name_prefix="campaign-bot-worker-db")
        # Handlers and the GitHub context are synchronous (PyGithub, git, SQLAlchemy block):
        # they run on this pool, one delivery per installation key at a time (the scheduler
        # holds the key until its delivery ends), ``concurrency`` keys at once.
        self._handler_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="campaign-bot-handler")
        self._ready = threading.Event()
        self._done = threading.Event()

    # -- thread management -----------------------------------------------------------------
    def start_thread(self) -> None:
        """Run :meth:`run` on a new daemon thread with its own event loop."""
        self._thread = threading.Thread(target=self._thread_main, name="campaign-bot-worker",
                                        daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self.run())
        except Exception:  # noqa: BLE001 - a dead worker is reported by /healthz
            log.exception("worker stopped on an unexpected error")
        finally:
            self._done.set()

    @property
    def alive(self) -> bool:
        """True while the worker loop runs."""
        return self._ready.is_set() and not self._done.is_set()

    def wake(self) -> None:
        """Tell the worker new deliveries are stored (thread-safe, never blocks)."""
        loop, ev = self._loop, self._wake
        if loop is not None and ev is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(ev.set)
            except RuntimeError:  # loop closed between the check and the call
                pass

    def request_stop(self, grace: float = 10.0) -> None:
        """Ask :meth:`run` to stop: no new deliveries; running ones get ``grace`` seconds,
        then are cancelled: a replica hands them back to the queue at once
        (:func:`bot.inbox.store.release`), a lone worker leaves them ``processing`` for the
        next start.
        Call on the worker's loop or through :meth:`stop`."""
        self._stopping = True
        self._grace = grace
        self.wake()

    def stop(self, grace: float = 10.0) -> None:
        """:meth:`request_stop`, then wait for the worker thread to end."""
        self.request_stop(grace)
        if self._thread is not None:
            self._thread.join(grace + 5)

    # -- the loop --------------------------------------------------------------------------
    async def run(self) -> None:
        """Recover orphans, then schedule deliveries until :meth:`stop`."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        n = await self._recover()
        if n:
            log.warning("requeued %d deliveries left processing by the previous run", n)
        self._ready.set()
        while not self._stopping:
            self._wake.clear()
            try:
                await self._maintain()
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.exception("worker could not renew its leases; retrying")
            try:
                timeout = await self._schedule()
            except Exception:  # noqa: BLE001 - e.g. the database is briefly unreachable
                log.exception("worker could not read the queue; retrying")
                timeout = self.poll_interval
            if timeout <= 0:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                continue
            if not self._urgent and self.coalesce > 0 and not self._stopping:
                await asyncio.sleep(self.coalesce)
            self._urgent = False
        if self._inflight:
            _, pending = await asyncio.wait(list(self._inflight.values()),
                                            timeout=getattr(self, "_grace", 10.0))
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        if self.replica is not None and self._claimed:
            n = await self._db(store.release, self.engine, self.replica, sorted(self._claimed))
            log.warning("handed %d unfinished deliveries back to the queue", n)

    async def _recover(self) -> int:
        if self.replica is None:
            n: int = await self._db(store.recover, self.engine)
            return n
        mine = await self._db(store.release, self.engine, self.replica)
        expired = await self._db(store.reclaim_expired, self.engine)
        return int(mine) + int(expired)

    async def _maintain(self) -> None:
        """Every ``lease_s / 3`` seconds (replicas only): renew this replica's leases and
        queue again the deliveries whose lease ran out."""
        if self.replica is None or self._loop is None:
            return
        now = self._loop.time()
        if now - self._maintained < self.lease_s / 3:
            return
        self._maintained = now
        if self._claimed:
            await self._db(store.heartbeat, self.engine, self.replica, sorted(self._claimed),
                           self.lease_s)
        n = await self._db(store.reclaim_expired, self.engine)
        if n:
            log.warning("requeued %d deliveries whose replica's lease ran out", n)

    async def run_until_idle(self, timeout: float = 30.0) -> None:
        """Process until nothing is queued or running that is due now (tests, replay)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self._recover()
        deadline = self._loop.time() + timeout
        while True:
            await self._schedule()
            if self._inflight:
                await asyncio.wait(list(self._inflight.values()),
                                   return_when=asyncio.FIRST_COMPLETED)
                continue
            heads = await self._db(store.queue_heads, self.engine)
            now = store.utcnow()
            if not any((_utc(h.not_before) or now) <= now for h in heads):
                return
            if self._loop.time() > deadline:
                raise TimeoutError("worker did not become idle")

    async def _schedule(self) -> float:
        """Start every startable queue head; returns seconds until the schedule should run
        again: 0 when it made progress on its own, else until the next due retry (capped at
        ``poll_interval``)."""
        heads = await self._db(store.queue_heads, self.engine)
        now = store.utcnow()
        wait = self.poll_interval
        if self.replica is not None:
            wait = min(wait, self.lease_s / 3)
        for h in heads:
            if self._stopping:
                break
            if h.key in self._inflight:
                continue
            nb = _utc(h.not_before)
            if nb is not None and nb > now:
                wait = min(wait, (nb - now).total_seconds())
                continue
            if not self._handled(h):
                # Events no feature handles: the leading run of such deliveries of this key
                # is done in one statement, then the schedule runs again at once.
                await self._complete_unhandled_run(h.key)
                wait = 0.0
                continue
            if len(self._inflight) >= self.concurrency:
                break
            task = asyncio.create_task(self._process(h.seq, h.key),
                                       name=f"delivery-{h.delivery_id}")
            self._inflight[h.key] = task
            task.add_done_callback(functools.partial(self._finished, h.key))
        return max(wait, 0.0)

    def _handled(self, d: store.Delivery) -> bool:
        probe = Event(d.delivery_id, d.event, {"action": d.action} if d.action else {})
        return bool(self.router.handlers_for(probe))

    async def _complete_unhandled_run(self, key: str) -> None:
        rows = await self._db(store.queued_of_key, self.engine, key)
        now = store.utcnow()
        run: list[int] = []
        for r in rows:
            nb = _utc(r.not_before)
            if nb is not None and nb > now:
                continue  # waiting out a retry delay: it holds no place in the order
            if self._handled(r):
                break
            run.append(r.seq)
        n = await self._db(store.complete_unhandled, self.engine, run)
        if n:
            self.metrics.inc_processed(failed=False, count=n)

    def _on_handler_pool(self, fn: Callable[..., Any], *args: Any) -> Awaitable[Any]:
        """``fn(*args)`` on the handler thread pool (see ``__init__``)."""
        return asyncio.get_running_loop().run_in_executor(self._handler_pool, fn, *args)

    def _db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Run the blocking database call ``fn(*args, **kwargs)`` on the worker's own
        threads."""
        return asyncio.get_running_loop().run_in_executor(
            self._db_pool, functools.partial(fn, *args, **kwargs))

    def _finished(self, key: str, _task: object = None) -> None:
        self._inflight.pop(key, None)
        if key in self._missed:  # another replica has it: wait for the next wake or poll
            self._missed.discard(key)
            return
        self._urgent = True  # the next delivery of this key may start at once
        if self._wake is not None:
            self._wake.set()

    async def _process(self, seq: int, key: str) -> None:
        d = await self._db(store.claim, self.engine, seq, replica=self.replica,
                           lease_s=self.lease_s)
        if d is None:
            self._missed.add(key)
            return
        self._claimed.add(seq)  # until finished; a cancelled one is released on stop
        received = _utc(d.received_at)
        if received is not None:
            self.metrics.delivery_started(received, d.attempts)
        try:
            await self._process_claimed(d)
            self._claimed.discard(seq)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - bookkeeping failed; keep the worker alive
            log.exception("delivery %s: worker error", d.delivery_id)
            try:
                await self._db(self._fail_or_retry, d, f"worker: {exc}", 0)
                self._claimed.discard(seq)
            except Exception:  # noqa: BLE001 - the lease runs out; another attempt follows
                log.exception("delivery %s: could not record the failure", d.delivery_id)

    async def _process_claimed(self, d: store.Delivery) -> None:
        try:
            payload = parse_payload(d.body, d.headers.get("content-type"))
        except PayloadError as exc:
            # The endpoint refuses such bodies, so only a hand-inserted row gets here; no
            # attempt can fix it.
            await self._db(store.record_handler, self.engine, d.seq, d.attempts,
                                    "bot.inbox.worker.parse", False, str(exc))
            await self._db(store.finish, self.engine, d.seq, "failed", error=str(exc),
                           replica=self.replica)
            self.metrics.inc_processed(failed=True, handler_failures=1)
            log.error("delivery %s: %s", d.delivery_id, exc)
            return
        try:
            check_shape(d.event, payload)
        except PayloadShapeError as exc:
            await self._permanent(d, "bot.inbox.payloads.check_shape", str(exc))
            return
        event = Event(delivery_id=d.delivery_id, name=d.event, payload=payload)
        done = await self._db(store.handlers_done, self.engine, d.seq)
        earlier = await self._db(store.permanent_failures, self.engine, d.seq)
        pending = [fn for fn in self.router.handlers_for(event)
                   if handler_name(fn) not in done and handler_name(fn) not in earlier]
        failures: list[str] = []
        rate_waits: list[float | None] = []  # per transient failure: GitHub's wait, or None
        permanent = [f"{n}: {e.removeprefix(store.PERMANENT_PREFIX)}"
                     for n, e in earlier.items()]
        if pending:
            try:
                gh, config = await self._on_handler_pool(self.context_factory, event)
            except Exception as exc:  # noqa: BLE001 - e.g. GitHub unreachable: retry later
                msg = f"{type(exc).__name__}: {exc}"
                if permanent_reason(exc) is not None:  # e.g. the repository is gone (404),
                    # or no credentials: one log line (no traceback), not retried
                    await self._permanent(d, "bot.inbox.worker.context", msg)
                    return
                log.exception("delivery %s: no GitHub context", d.delivery_id)
                await self._db(store.record_handler, self.engine, d.seq, d.attempts,
                                        "bot.inbox.worker.context", False, msg)
                await self._db(self._fail_or_retry, d, f"context: {msg}", 1)
                return
            for fn in pending:
                name = handler_name(fn)
                one = Router()
                one.on(event.name)(fn)
                perm = False
                rate_wait: float | None = None
                try:
                    results = await asyncio.wait_for(
                        self._on_handler_pool(one.dispatch, event, gh, config),
                        self.handler_timeout)
                    ok, err, perm = results[0].ok, results[0].error, results[0].permanent
                    rate_wait = results[0].rate_limited_s
                except TimeoutError:
                    log.error("handler %s timed out on delivery %s after %.0f s", name,
                              d.delivery_id, self.handler_timeout)
                    ok, err = False, f"TimeoutError: no result after {self.handler_timeout:g} s"
                await self._db(store.record_handler, self.engine, d.seq, d.attempts,
                                        name, ok,
                                        f"{store.PERMANENT_PREFIX}{err}" if perm else err)
                if perm:
                    permanent.append(f"{name}: {err}")
                elif not ok:
                    failures.append(f"{name}: {err}")
                    rate_waits.append(rate_wait)
        if failures and all(w is not None for w in rate_waits):
            # only GitHub's rate limits stopped it: wait for the reset, spend no attempt
            await self._db(self._wait_for_rate_limit, d, "; ".join(
                failures + [f"{store.PERMANENT_PREFIX}{p}" for p in permanent]),
                max(w for w in rate_waits if w is not None))
        elif failures:
            # transient failures are retried (the permanent ones are not run again)
            await self._db(self._fail_or_retry, d, "; ".join(
                failures + [f"{store.PERMANENT_PREFIX}{p}" for p in permanent]),
                len(failures) + len(permanent))
        elif permanent:
            msg = f"{store.PERMANENT_PREFIX}not retried: " + "; ".join(permanent)
            await self._db(store.finish, self.engine, d.seq, "failed", error=msg,
                           replica=self.replica)
            self.metrics.inc_processed(failed=True, handler_failures=len(permanent))
            log.error("delivery %s failed permanently (not retried): %s", d.delivery_id,
                      "; ".join(permanent))
        else:
            await self._db(store.finish, self.engine, d.seq, "done", replica=self.replica)
            self.metrics.inc_processed(failed=False)

    async def _permanent(self, d: store.Delivery, where: str, error: str) -> None:
        """Record a failure no retry can fix and end the delivery ``failed`` at once."""
        await self._db(store.record_handler, self.engine, d.seq, d.attempts, where, False,
                       f"{store.PERMANENT_PREFIX}{error}")
        await self._db(store.finish, self.engine, d.seq, "failed",
                       error=f"{store.PERMANENT_PREFIX}not retried: {error}",
                       replica=self.replica)
        self.metrics.inc_processed(failed=True, handler_failures=1)
        log.error("delivery %s failed permanently (not retried): %s", d.delivery_id, error)

    def _wait_for_rate_limit(self, d: store.Delivery, error: str, wait_s: float) -> None:
        """Queue ``d`` again after GitHub's rate-limit reset (``wait_s`` seconds,
        :func:`bot.inbox.router.rate_limit_wait`) and give back the attempt it was claimed
        with: a rate limit says "not now", not "this delivery fails", so a burst of
        secondary-rate-limit 403s never uses up ``max_attempts`` (only the failed handlers
        run again, as after any retry)."""
        nb = store.utcnow() + dt.timedelta(seconds=max(0.0, wait_s))
        store.finish(self.engine, d.seq, "queued", error=error, not_before=nb,
                     replica=self.replica, refund_attempt=True)
        self.metrics.inc_processed(failed=True, handler_failures=1, retry=True)
        log.warning("delivery %s rate limited by GitHub, again in %g s (attempt not counted):"
                    " %s", d.delivery_id, wait_s, error)

    def _fail_or_retry(self, d: store.Delivery, error: str, n_failures: int) -> None:
        if d.attempts < self.max_attempts:
            delay = self.retry_delays[min(d.attempts - 1, len(self.retry_delays) - 1)]
            nb = store.utcnow() + dt.timedelta(seconds=delay)
            store.finish(self.engine, d.seq, "queued", error=error, not_before=nb,
                         replica=self.replica)
            self.metrics.inc_processed(failed=True, handler_failures=n_failures, retry=True)
            log.warning("delivery %s attempt %d/%d failed, retry in %g s: %s", d.delivery_id,
                        d.attempts, self.max_attempts, delay, error)
        else:
            store.finish(self.engine, d.seq, "failed", error=error, replica=self.replica)
            self.metrics.inc_processed(failed=True, handler_failures=n_failures)
            log.error("delivery %s failed after %d attempts: %s", d.delivery_id, d.attempts,
                      error)
