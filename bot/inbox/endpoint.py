"""The HTTP face of the inbox: ``POST /webhook``, ``GET /healthz``, ``GET /metrics``.

``POST /webhook`` is thin and fails closed, in this order:

1. no ``X-Hub-Signature-256`` → 401;
2. ``Content-Length`` above ``max_body_bytes`` → 413 without reading; the body is then read
   in chunks and a stream that passes the limit → 413 (chunked bodies have no length);
3. signature not valid for the raw bytes (``hmac.compare_digest``) → 401;
4. no ``X-GitHub-Event`` or ``X-GitHub-Delivery``, or one longer than the inbox stores
   (``MAX_EVENT_CHARS``, ``MAX_DELIVERY_ID_CHARS``: refused, never cut, so two long ids
   cannot collide) → 400;
5. ``ping`` → 200 ``{"ok": true, "zen": ...}`` (not stored);
6. body not a JSON object (or form without ``payload``, or nested deeper than
   ``MAX_PAYLOAD_DEPTH``) → 400, **not stored**: GitHub never
   sends that, so a signed malformed body means a broken sender; storing it would only park a
   delivery no attempt can process;
7. store (id, event, headers, body, received time) → 202 ``{"status": "queued"}``; a
   delivery id already stored → 200 ``{"status": "duplicate"}`` and it is not processed again.
   A store that fails → 503 (not acknowledged: GitHub shows the delivery failed).

Processing happens in the background (:mod:`bot.inbox.worker`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from bot.inbox import store
from bot.inbox.delivery import (
    DELIVERY_HEADER,
    DROPPED_HEADERS,
    EVENT_HEADER,
    MAX_DELIVERY_ID_CHARS,
    MAX_EVENT_CHARS,
    SIGNATURE_HEADER,
    PayloadError,
    delivery_key,
    parse_payload,
    repo_of,
    verify_signature,
)
from bot.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger(__name__)

PING_ZEN = "Speak like a human."


@dataclass
class Inbox:
    """What the routes use: the webhook ``secret`` (bytes), the largest body accepted
    (bytes), ``submit(row) -> inserted`` (:class:`bot.inbox.writer.InboxWriter.submit`),
    the ``metrics``, ``problems()`` for ``/healthz`` (empty: healthy) and ``queue_counts()``
    (delivery status -> rows) for ``/metrics``; the last two are blocking (run in a thread)."""

    secret: bytes
    max_body: int
    submit: Callable[[store.NewDelivery], Awaitable[bool]]
    metrics: Metrics
    problems: Callable[[], list[str]]
    queue_counts: Callable[[], Mapping[str, int]]
    secret_source: Callable[[], bytes | None] | None = None
    """When set, the secret is asked of it per delivery (the App setup page sets it while the
    service runs); None or empty from it answers 503: the bot is not set up yet."""
    redelivery_counts: Callable[[], Mapping[str, int]] | None = None
    pool_queues: Callable[[], Mapping[str, tuple[int, float]]] | None = None
    """When set (blocking), the screen queues for ``/metrics``: pool -> (queued screens,
    seconds the oldest has waited)."""


ROOT_PAGE = (
    "campaign-bot: the webhook service of a GitHub App for ML inference performance "
    "campaigns.\n\n"
    "POST /webhook    GitHub's webhook deliveries (signed with the webhook secret)\n"
    "GET  /healthz    service health (JSON)\n"
    "GET  /metrics    Prometheus metrics\n"
    "GET  /c/OWNER/REPO/CAMPAIGN    live pages of a campaign\n\n"
    "Operators: docs/deploy.md of campaign-bot; campaign owners: docs/user-guide.md.\n"
)
"""What ``GET /`` answers: plain text naming the service's routes."""

def add_routes(app: FastAPI, inbox: Inbox) -> None:
    """Add ``POST /webhook``, ``GET /healthz`` and ``GET /metrics`` to ``app``."""
    m = inbox.metrics
    max_body = inbox.max_body

    def reject(reason: str, status: int, detail: str, delivery: str | None) -> Response:
        m.inc_rejected(reason)
        log.warning("webhook rejected (%s, delivery %s): %s", status, delivery or "-", detail)
        return JSONResponse({"error": detail}, status_code=status)

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        h = request.headers
        delivery = h.get(DELIVERY_HEADER)
        sig = h.get(SIGNATURE_HEADER)
        if not sig:
            return reject("signature", 401, "missing X-Hub-Signature-256", delivery)
        secret = inbox.secret_source() if inbox.secret_source is not None else inbox.secret
        if not secret:
            return reject("not_set_up", 503, "the bot has no webhook secret yet: finish the "
                          "GitHub App setup", delivery)
        cl = h.get("content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return reject("bad_request", 400, "bad Content-Length", delivery)
            if n > max_body:
                return reject("too_large", 413, f"body of {n} bytes exceeds {max_body}",
                              delivery)
        chunks = bytearray()
        async for chunk in request.stream():
            chunks += chunk
            if len(chunks) > max_body:
                return reject("too_large", 413, f"body exceeds {max_body} bytes", delivery)
        body = bytes(chunks)
        if not verify_signature(secret, body, sig):
            return reject("signature", 401, "signature does not match the body", delivery)
        event = h.get(EVENT_HEADER)
        if not event or not delivery:
            return reject("bad_request", 400, "missing X-GitHub-Event or X-GitHub-Delivery",
                          delivery)
        if len(delivery) > MAX_DELIVERY_ID_CHARS or len(event) > MAX_EVENT_CHARS:
            return reject("bad_request", 400,
                          f"X-GitHub-Delivery over {MAX_DELIVERY_ID_CHARS} characters or "
                          f"X-GitHub-Event over {MAX_EVENT_CHARS}", delivery[:80])
        if event == "ping":
            return JSONResponse({"ok": True, "zen": PING_ZEN})
        try:
            payload = parse_payload(body, h.get("content-type"))
        except PayloadError as exc:
            return reject("malformed", 400, str(exc), delivery)
        action = payload.get("action")
        row = store.NewDelivery(
            delivery_id=delivery,
            event=event,
            action=action[:100] if isinstance(action, str) else None,
            repo=repo_of(payload),
            key=delivery_key(payload),
            headers={k: v for k, v in h.items() if k not in DROPPED_HEADERS},
            body=body,
            received_at=store.utcnow(),
        )
        try:
            inserted = await inbox.submit(row)
        except Exception:  # noqa: BLE001 - not stored, so not acknowledged: GitHub shows it failed
            return JSONResponse({"error": "could not store the delivery"}, status_code=503)
        if not inserted:
            m.inc_duplicate()
            return JSONResponse({"status": "duplicate", "delivery": delivery}, status_code=200)
        m.inc_received(event)
        return JSONResponse({"status": "queued", "delivery": delivery}, status_code=202)

    @app.get("/")
    async def root() -> Response:
        # a person who opens the service's address: what answers here, instead of a 404
        return Response(ROOT_PAGE, media_type="text/plain; charset=utf-8")

    @app.get("/healthz")
    async def healthz() -> Response:
        problems = await asyncio.to_thread(inbox.problems)
        if problems:
            return JSONResponse({"status": "unhealthy", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        counts = await asyncio.to_thread(inbox.queue_counts)
        redeliveries = (await asyncio.to_thread(inbox.redelivery_counts)
                        if inbox.redelivery_counts is not None else None)
        pools = (await asyncio.to_thread(inbox.pool_queues)
                 if inbox.pool_queues is not None else None)
        text = await asyncio.to_thread(m.exposition, counts, redeliveries, pools)
        return Response(text, media_type=CONTENT_TYPE)
