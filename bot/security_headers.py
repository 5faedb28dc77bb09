"""Response headers every page of ``campaign-bot serve`` carries, set by one ASGI middleware.

* ``Content-Security-Policy``: nothing loads but the bot's own style sheet and inline styles
  (the charts are inline SVG with their own ``<style>``), images from the bot or ``data:``,
  no script at all; forms post only to the bot itself and to GitHub (the App manifest form of
  ``/setup``); ``frame-ancestors 'none'`` forbids framing (clickjacking; CSP Level 3, W3C);
  ``base-uri 'none'``.
* ``X-Content-Type-Options: nosniff``: a response is never read as another type (Fetch
  standard, "X-Content-Type-Options").
* ``X-Frame-Options: DENY`` for browsers older than ``frame-ancestors`` (RFC 7034).

A header the route set itself is kept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message],
                                                                          Awaitable[None]]],
                   Awaitable[None]]


def content_security_policy(github_url: str) -> str:
    """The policy text; ``github_url`` (e.g. ``https://github.com``) is the one form target
    besides the bot itself."""
    parts = urlsplit(github_url)
    github = f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""
    return ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            f"form-action 'self'{' ' + github if github else ''}; frame-ancestors 'none'; "
            "base-uri 'none'")


class SecurityHeaders:
    """ASGI middleware adding :func:`content_security_policy`, ``nosniff`` and
    ``X-Frame-Options: DENY`` to every HTTP response that lacks them."""

    def __init__(self, app: ASGIApp, *, github_url: str) -> None:
        self.app = app
        self.headers = [
            (b"content-security-policy", content_security_policy(github_url).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
        ]

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in self.headers if k not in have]
            await send(message)

        await self.app(scope, receive, send_with_headers)
