"""Connection and request-body limits of the HTTP face (``campaign-bot serve``).

:func:`run_server` runs uvicorn with all of them (``campaign-bot serve``).  The parts, each
for one way a client that never finishes its request can take the service down:

* :class:`BodyLimits`, an ASGI middleware: the request body must arrive within
  ``body_timeout_s`` of the request head (408 and the connection closed), and the body bytes
  held by requests not yet answered, across all requests, stay under ``max_inflight_bytes``
  (503 before reading when the declared ``Content-Length`` does not fit, 503 as soon as a
  chunk would pass the budget).  Every body is unauthenticated until the whole of it is read
  (the signature covers the raw bytes), so this budget is what an unsigned sender can make
  the service hold.
* :func:`guarded_protocol`, uvicorn's h11 protocol with two things uvicorn does not offer:
  a deadline for the request head (from the connection, or from the previous response on a
  kept-alive one) and for the whole body (a backstop for routes that never read theirs), and
  a cap on open connections.  At the cap a new connection closes the oldest one that has not
  finished sending its request (head first, then body), from the client address holding the
  most connections (:meth:`ConnectionGuard.admit`); connections whose request is complete
  are never closed for another.  uvicorn's own ``limit_concurrency`` is not used:
  it counts idle and stalled connections too and answers 503 to every new request once they
  fill it, ``/healthz`` included, which is what a flood of stalled connections wants.
  uvicorn's open issue "Further timeouts and resource limiting" (encode/uvicorn #157) lists
  these timeouts as not implemented; ``timeout_keep_alive`` is reset by every byte received.
* :func:`install_accept_error_handler`: when the process runs out of file descriptors,
  asyncio logs the failed ``accept()`` with a traceback on every retry; this handler logs one
  line per interval with a count instead; :class:`RepeatFilter` does the same for uvicorn's
  one warning per malformed request.

The cap is kept below the file-descriptor limit (:func:`connection_cap`, after
:func:`raise_fd_limit` raised the soft limit to the hard one), with
:data:`FD_RESERVE` descriptors left for the database, the worker's pipes, log files and the
connections accepted in one batch (:data:`LISTEN_BACKLOG`), so ``accept()`` itself does not
fail: the oldest stalled connection is closed instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

FD_RESERVE = 192
"""File descriptors kept free below the soft ``RLIMIT_NOFILE`` by :func:`connection_cap`: the
database, the worker process's pipes, log and temporary files, the :data:`OVERFLOW`
connections and up to two accept batches of :data:`LISTEN_BACKLOG` connections opened
before the cap closes old ones (the connections waiting in the listen queue hold no
descriptor of this process)."""
LISTEN_BACKLOG = 32
"""The backlog handed to asyncio, which accepts up to this many connections in one go before
any of them runs (``BaseSelectorEventLoop._accept_connection``): it bounds how far above the
cap the descriptors in use can go."""
LISTEN_QUEUE = 1024
"""The listening socket's queue of connections not yet accepted (``listen(2)``, set again by
:func:`widen_listen_queue` once asyncio has set it to :data:`LISTEN_BACKLOG`; the kernel
caps it at ``net.core.somaxconn``).  When the queue is full the kernel drops a client's
handshake and the client retries after 1 s, then 2 s more: a long queue, drained
:data:`LISTEN_BACKLOG` at a time, keeps GitHub's connection waiting milliseconds behind a
flood instead."""
OVERFLOW = 64
"""Connections allowed over the cap while none of the open ones can be closed for a new one
(all not yet read once, or all with a complete request); they come out of
:data:`FD_RESERVE`.  Connections wait unread for about two passes of the event loop, of at most
:data:`LISTEN_BACKLOG` accepted connections each."""
SUMMARY_INTERVAL_S = 10.0
"""Repeated events (connections closed by a limit, failed ``accept()``) are logged at most
once per this many seconds, as one line with a count."""
ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""The ``accept()`` errors asyncio retries after a pause (out of descriptors or memory)."""


class Summary:
    """Counts events of one kind and logs them at most once per ``interval`` seconds:
    ``note()`` adds one; the first event and the first after a quiet interval are logged
    at once, the rest are folded into the next line written, as ``(N more in the last S s)``
    (a quiet end leaves the last few uncounted in the log; ``total`` has them all)."""

    def __init__(self, logger: logging.Logger, level: int, message: str,
                 interval: float = SUMMARY_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.level, self.message = logger, level, message
        self.interval, self.clock = interval, clock
        self.total = 0
        self._pending = 0
        self._last: float | None = None

    def note(self, detail: str = "") -> None:
        """One more event; ``detail`` (say, a count) is added to a line that is written."""
        self.total += 1
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            self._pending += 1
            return
        extra = f" ({self._pending} more in the last {now - self._last:.0f} s)" \
            if self._pending and self._last is not None else ""
        self.logger.log(self.level, "%s%s%s", self.message, f": {detail}" if detail else "",
                        extra)
        self._pending, self._last = 0, now


# ------------------------------------------------------------------------- request bodies


class BodyTimeout(Exception):
    """The request body did not arrive within the deadline."""


class OverBudget(Exception):
    """Reading one more chunk would pass the in-flight body budget."""


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimits:
    """ASGI middleware: a total deadline for each request body and a budget for the body
    bytes all unanswered requests hold.

    ``timeout_s`` (seconds, > 0): from the request reaching the application to its last body
    byte; past it the application's ``receive()`` raises and the client gets 408 with
    ``Connection: close`` (if no response was started).  ``max_inflight_bytes`` (bytes, > 0):
    the sum over requests not yet answered of the body bytes they received; a request whose
    ``Content-Length`` does not fit in what is left gets 503 (``Retry-After: 5``) without
    reading its body, and one whose next chunk would pass it gets 503 and is not read
    further.  Bytes are counted as received, not as declared, so a stalled sender holds only
    what it sent.  A client that disconnects mid-body ends its request quietly (no
    traceback).  Other scope types pass through.  ``on_refused(reason)``, when given, is
    called for each refusal: ``body_timeout`` (408) or ``busy`` (503)."""

    def __init__(self, app: ASGIApp, *, timeout_s: float, max_inflight_bytes: int,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.on_refused = on_refused or (lambda reason: None)
        self.timeout_s = timeout_s
        self.max_inflight_bytes = max_inflight_bytes
        self.inflight = 0
        self.timeouts = Summary(log, logging.WARNING,
                                f"request body not received within {timeout_s:g} s: 408")
        self.refusals = Summary(log, logging.WARNING,
                                f"request bodies over the in-flight budget of "
                                f"{max_inflight_bytes} bytes: 503")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_inflight_bytes - self.inflight:
            self.refusals.note(f"Content-Length {declared}, {self.inflight} held")
            self.on_refused("busy")
            await _plain(send, 503, b"busy: too many request bodies in flight, retry later\n",
                         retry_after=True)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        held = 0
        body_done = False
        started = False

        async def limited_receive() -> Message:
            nonlocal held, body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout from None
            if message["type"] == "http.request":
                n = len(message.get("body", b""))
                if self.inflight + n > self.max_inflight_bytes:
                    raise OverBudget
                self.inflight += n
                held += n
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except BodyTimeout:
            self.timeouts.note(f"{scope.get('method')} {scope.get('path')}")
            self.on_refused("body_timeout")
            if not started:
                await _plain(send, 408, b"request body not received in time\n")
        except OverBudget:
            self.refusals.note(f"{held} bytes read of this one, {self.inflight} held")
            self.on_refused("busy")
            if not started:
                await _plain(send, 503, b"busy: too many request bodies in flight, retry "
                             b"later\n", retry_after=True)
        except Exception as exc:
            if not _is_disconnect(exc):
                raise
            log.debug("client disconnected before its request body was read")
        finally:
            self.inflight -= held


def _is_disconnect(exc: BaseException) -> bool:
    """Starlette's ``ClientDisconnect`` (the client left while its body was read), by name:
    this module does not depend on Starlette."""
    return type(exc).__name__ == "ClientDisconnect"


async def _plain(send: Send, status: int, body: bytes, *, retry_after: bool = False) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    if retry_after:
        headers.append((b"retry-after", b"5"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------------------- connections


def widen_listen_queue(sock: Any, queue: int = LISTEN_QUEUE) -> None:
    """``listen(queue)`` on the listening socket ``sock`` (a socket or asyncio's
    ``TransportSocket``: anything with ``fileno()``, ``family`` and ``type``), through a
    duplicate of its descriptor; the accept batch asyncio uses is not changed."""
    import socket

    dup = socket.fromfd(sock.fileno(), sock.family, sock.type)
    try:
        dup.listen(queue)
    finally:
        dup.close()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one, as the Go runtime does for every
    program since Go 1.19 and as systemd recommends for programs that do not use
    ``select(2)`` (the soft limit of 1,024 only protects ``select``'s fixed-size sets; this
    service waits with epoll).  Returns ``(soft, hard)`` after; the soft limit stays as it
    was when the hard one cannot be set (``OSError``, ``ValueError``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as exc:
            log.info("could not raise the file-descriptor limit from %s to %s: %s", soft,
                     hard, exc)
    return soft, hard


def connection_cap(max_connections: int, *, reserve: int = FD_RESERVE) -> int:
    """The open connections allowed: ``max_connections``, lowered to the soft
    ``RLIMIT_NOFILE`` minus ``reserve`` (at least 1) so that ``accept()`` keeps finding a
    free descriptor."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - reserve))


class ConnectionGuard:
    """What the connections of one server share: the cap (connections), the head and body
    deadlines (seconds), the open connections oldest first, and the log summaries."""

    def __init__(self, *, cap: int, header_timeout_s: float, body_timeout_s: float) -> None:
        self.cap = cap
        self.header_timeout_s = header_timeout_s
        # the middleware answers 408 at body_timeout_s; this closes what it did not see
        self.body_backstop_s = body_timeout_s + 2.0
        self.open: dict[Any, None] = {}  # insertion order: oldest first
        self.hosts: dict[Any, int] = {}  # client address -> open connections
        self.head_timeouts = Summary(log, logging.WARNING, "connections closed: no complete "
                                     f"request head within {header_timeout_s:g} s")
        self.body_timeouts = Summary(log, logging.WARNING, "connections closed: request body "
                                     f"not received within {self.body_backstop_s:g} s")
        self.evictions = Summary(log, logging.WARNING,
                                 f"connection cap of {cap} reached: closed the oldest "
                                 "connection still sending its request")
        self.refused = Summary(log, logging.WARNING,
                               f"connection cap of {cap} + {OVERFLOW} reached, none of the "
                               "open connections can be closed: closed the new one")

    def admit(self, conn: Any) -> bool:
        """Register ``conn`` (a new connection).  At the cap, close one connection that is
        still sending its request (head first, then body) and has been read at least once
        (``conn.seen``: one just accepted may hold a whole request not yet read), from the
        client address that holds the most open connections, oldest first: a flood from a few
        addresses closes its own connections, not GitHub's.  When that address has none to
        close, go up to :data:`OVERFLOW` over the cap; there, close such a connection of any
        address, or else ``conn`` itself: returns False (the caller closes it)."""
        if len(self.open) >= self.cap:
            top = max(self.hosts, key=self.hosts.__getitem__, default=None)
            victim = self._victim(top)
            if victim is None and len(self.open) >= self.cap + OVERFLOW:
                victim = self._victim(None)
                if victim is None:
                    self.refused.note(f"{len(self.open)} open")
                    return False
            if victim is not None:
                self.evictions.note(f"{len(self.open)} open, {self.hosts.get(victim.host, 0)} "
                                    f"of them from {victim.host}")
                self.forget(victim)
                victim.abort_request()
        conn.host = conn.client[0] if conn.client else None
        self.open[conn] = None
        self.hosts[conn.host] = self.hosts.get(conn.host, 0) + 1
        return True

    def _victim(self, host: Any) -> Any:
        """The oldest seen connection of ``host`` (any host: None) still sending its request
        head, else its body; None when there is none."""
        for phase in ("head", "body"):
            for c in self.open:
                if c.seen and (host is None or c.host == host) and c.phase() == phase:
                    return c
        return None

    def forget(self, conn: Any) -> None:
        """``conn`` is closed."""
        if self.open.pop(conn, False) is None:
            n = self.hosts.get(conn.host, 0) - 1
            if n > 0:
                self.hosts[conn.host] = n
            else:
                self.hosts.pop(conn.host, None)


def guarded_protocol(guard: ConnectionGuard) -> type:
    """uvicorn's h11 protocol class (pass it as ``uvicorn.Config(http=...)``) whose
    connections are admitted by ``guard`` and closed when their request head or body misses
    its deadline.  Only the h11 implementation is wrapped (httptools' is not used by this
    service: ``serve`` passes this class)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """:class:`uvicorn.protocols.http.h11_impl.H11Protocol` with ``guard``'s cap and
        deadlines."""

        _deadline: asyncio.TimerHandle | None = None
        _armed_for: str | None = None
        seen = False
        host: str | None = None
        """True once the event loop has read what the connection had sent when accepted."""

        def phase(self) -> str:
            """``head`` (waiting for or reading a request head, idle keep-alive included),
            ``body`` (reading a request body) or ``busy`` (request complete)."""
            state = self.conn.their_state
            if state is h11.IDLE:
                return "head"
            if state is h11.SEND_BODY:
                return "body"
            return "busy"

        def abort_request(self) -> None:
            """Close the connection now (the application sees a disconnect)."""
            self._disarm()
            if not self.transport.is_closing():
                self.transport.close()

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline, self._armed_for = None, None

        def _rearm(self) -> None:
            """Match the deadline to the phase: a head deadline while reading a head, a body
            deadline while reading a body, none once the request is complete."""
            if self.transport is None or self.transport.is_closing():
                self._disarm()
                return
            phase = self.phase()
            if phase == self._armed_for:
                return
            self._disarm()
            if phase == "head":
                self._deadline = self.loop.call_later(guard.header_timeout_s, self._expired,
                                                      guard.head_timeouts)
            elif phase == "body":
                self._deadline = self.loop.call_later(guard.body_backstop_s, self._expired,
                                                      guard.body_timeouts)
            else:
                return
            self._armed_for = phase

        def _expired(self, summary: Summary) -> None:
            self._deadline, self._armed_for = None, None
            if not self.transport.is_closing():
                summary.note()
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not guard.admit(self):
                transport.close()
                return
            # the transport starts reading on the loop's next pass: seen after that one
            self.loop.call_soon(self.loop.call_soon, self._mark_seen)
            self._rearm()

        def _mark_seen(self) -> None:
            self.seen = True

        def connection_lost(self, exc: Exception | None) -> None:
            guard.forget(self)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._rearm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._rearm()

    return GuardedH11Protocol


# ------------------------------------------------------------------------ accept() errors


class RepeatFilter(logging.Filter):
    """A logging filter that lets through records whose message is not one of ``messages``
    and turns those that are into one :class:`Summary` line per interval each (uvicorn logs
    ``Invalid HTTP request received.`` once per bad connection, a flood of lines for a flood
    of connections)."""

    def __init__(self, logger: logging.Logger, messages: tuple[str, ...]) -> None:
        super().__init__()
        self.summaries = {m: Summary(logger, logging.WARNING, f"{m.rstrip('.')} (uvicorn)")
                          for m in messages}

    def filter(self, record: logging.LogRecord) -> bool:
        summary = self.summaries.get(record.getMessage())
        if summary is None:
            return True
        summary.note()
        return False



def install_accept_error_handler(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Make ``loop`` log a failed ``accept()`` for lack of descriptors or memory (asyncio
    retries it after a second, logging a traceback each time) as one line per
    :data:`SUMMARY_INTERVAL_S` with a count; every other error goes to the handler that was
    set before.  Returns a function that restores that handler."""
    previous = loop.get_exception_handler()
    summary = Summary(log, logging.ERROR, "accept() failed, connections wait in the listen "
                      "queue (raise the file-descriptor limit or lower "
                      "CAMPAIGN_BOT_MAX_CONNECTIONS)")

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in ACCEPT_RESOURCE_ERRORS \
                and "accept" in str(context.get("message", "")):
            summary.note(f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}")
            return
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return lambda: loop.set_exception_handler(previous)


# --------------------------------------------------------------------------------- server


def run_server(app: Any, *, host: str, port: int, access_log: bool, log_level: str,
               max_connections: int, header_timeout_s: float, body_timeout_s: float,
               graceful_shutdown_s: int | None = None) -> bool:
    """Serve ``app`` with uvicorn until SIGINT/SIGTERM, with this module's limits: the soft
    descriptor limit raised (:func:`raise_fd_limit`), at most :func:`connection_cap`
    connections through :func:`guarded_protocol`, a listen queue of :data:`LISTEN_QUEUE`
    accepted :data:`LISTEN_BACKLOG` at a time, uvicorn's per-request warnings summarised
    (:class:`RepeatFilter`).  ``log_config=None``: uvicorn's loggers propagate to the root
    handler (whose filters mask secrets).  ``graceful_shutdown_s``: on SIGTERM, seconds the
    open requests get to finish before their connections are closed (None: no bound).
    Returns False when the server could not start (the port is taken, say), as
    ``uvicorn.run`` then exits 3."""
    import uvicorn

    raise_fd_limit()
    cap = connection_cap(max_connections)
    guard = ConnectionGuard(cap=cap, header_timeout_s=header_timeout_s,
                            body_timeout_s=body_timeout_s)
    log.info("at most %d connections (CAMPAIGN_BOT_MAX_CONNECTIONS=%d, file descriptors %s)",
             cap, max_connections, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    uvicorn_log = logging.getLogger("uvicorn.error")
    quiet = RepeatFilter(log, ("Invalid HTTP request received.",))
    uvicorn_log.addFilter(quiet)
    config = uvicorn.Config(app, host=host, port=port, access_log=access_log,
                            log_level=log_level, lifespan="on", log_config=None,
                            http=guarded_protocol(guard), backlog=LISTEN_BACKLOG,
                            timeout_graceful_shutdown=graceful_shutdown_s)

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            for srv in getattr(self, "servers", []):
                for sock in srv.sockets:
                    widen_listen_queue(sock)

    server = Server(config)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
    finally:
        uvicorn_log.removeFilter(quiet)
    return bool(server.started)
