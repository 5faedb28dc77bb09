"""The GitHub App's own webhook log, through PyGithub's :class:`github.GithubIntegration`
(App JWT auth, ``Auth.AppAuth``): list recent webhook deliveries and ask for a redelivery.

* ``GET /app/hook/deliveries`` (operation ``apps/list-webhook-deliveries``): newest first,
  cursor pagination: the next page's URL is in the ``Link`` header's ``rel="next"``; its
  ``cursor`` query parameter ("the starting delivery from which the page of deliveries is
  fetched", same page of the docs) lets a later call resume there.
* ``POST /app/hook/deliveries/{delivery_id}/attempts`` (``apps/redeliver-webhook-delivery``):
  202 Accepted; GitHub then sends the delivery again with the same ``X-GitHub-Delivery``.

Source: GitHub Docs, "REST API endpoints for GitHub App webhooks"
(https://docs.github.com/rest/apps/webhooks) and "Automatically redelivering failed
deliveries for a GitHub App webhook" (a scheduled job of exactly this shape).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from github import Auth, GithubException, GithubIntegration

from bot.github.port import GitHubError, GitHubRetryableError

_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')


@dataclass(frozen=True)
class Page:
    """One page of the webhook log: ``items`` (``hook-delivery-item`` dicts, newest first),
    ``rate_remaining`` (``X-RateLimit-Remaining`` of the answer; None when absent) and
    ``next_cursor`` (the ``cursor`` of the next page's link; None on the last page, or when
    the link has none) and ``last`` (no next page)."""

    items: list[dict[str, Any]]
    rate_remaining: int | None
    next_cursor: str | None = None
    last: bool = True


class _ReusedJwtAppAuth(Auth.AppAuth):
    """PyGithub's App JWT auth, reusing one JWT for :data:`JWT_REUSE_S` seconds instead of
    signing a new one per request (loading the PEM and signing with RS256 costs tens of ms of
    CPU: a run asking for 1,000 redeliveries would otherwise spend most of its time there).
    The JWT is valid for 5 minutes and dated 60 s back against clock drift (PyGithub's
    defaults; GitHub Docs, "Generating a JSON Web Token (JWT) for a GitHub App", allows up to
    10 minutes)."""

    def __init__(self, app_id: int, private_key: str) -> None:
        super().__init__(app_id, private_key)
        self._jwt: tuple[float, str] | None = None
        self._jwt_lock = threading.Lock()

    @property
    def token(self) -> str:
        with self._jwt_lock:
            now = time.monotonic()
            if self._jwt is None or now - self._jwt[0] > JWT_REUSE_S:
                self._jwt = (now, self.create_jwt())
            return self._jwt[1]


JWT_REUSE_S = 60.0
"""Seconds one App JWT is reused by :class:`AppWebhookLog` (well inside its lifetime)."""


class AppWebhookLog:
    """The App's webhook deliveries on ``base_url`` with App JWT auth (``app_id`` and the PEM
    ``private_key``).  Every call is blocking; errors are :class:`bot.github.GitHubError`
    (:class:`bot.github.GitHubRetryableError` for 5xx, rate limits and transport errors).

    No retries here: the recovery job runs again at its next interval.  ``throttle`` keeps
    PyGithub's pacing of 1 s between writes (GitHub's best practices for mutating calls)."""

    def __init__(self, *, base_url: str, app_id: int, private_key: str,
                 throttle: bool = True, timeout: int = 30) -> None:
        pace: dict[str, Any] = {"seconds_between_requests": 0.05, "seconds_between_writes": 1.0}
        if not throttle:
            pace = {"seconds_between_requests": None, "seconds_between_writes": None}
        self._gi = GithubIntegration(auth=_ReusedJwtAppAuth(int(app_id), private_key),
                                     base_url=base_url.rstrip("/"), timeout=timeout,
                                     retry=None, **pace)

    def pages(self, per_page: int = 100, cursor: str | None = None) -> Iterator[Page]:
        """Pages of ``GET /app/hook/deliveries``, newest first, from the page at ``cursor``
        (a :attr:`Page.next_cursor` of an earlier call; None: the newest), following
        ``rel="next"`` until the last page (the caller stops early by leaving the loop).
        GitHub answers a cursor it does not know with 4xx: :class:`bot.github.GitHubError`."""
        url: str | None = "/app/hook/deliveries"
        params: dict[str, Any] | None = {"per_page": per_page}
        if cursor is not None and params is not None:
            params["cursor"] = cursor
        while url:
            headers, data = self._call("GET", url, params, "list webhook deliveries")
            if not isinstance(data, list):
                raise GitHubError("list webhook deliveries: the answer is not a JSON array")
            m = _NEXT.search(_header(headers, "link") or "")
            nxt = parse_qs(urlsplit(m.group(1)).query).get("cursor", [None])[0] if m else None
            yield Page([d for d in data if isinstance(d, dict)], _remaining(headers), nxt,
                       last=m is None)
            url, params = (m.group(1), None) if m else (None, None)

    def redeliver(self, hook_delivery_id: int) -> int | None:
        """Ask GitHub to send delivery ``hook_delivery_id`` again; returns the
        ``X-RateLimit-Remaining`` of the answer (None when absent).  Raises
        :class:`bot.github.GitHubError` (e.g. 422 outside the redelivery window)."""
        headers, _ = self._call("POST", f"/app/hook/deliveries/{int(hook_delivery_id)}/attempts",
                                None, f"redeliver webhook delivery {hook_delivery_id}")
        return _remaining(headers)

    def _call(self, verb: str, url: str, params: dict[str, Any] | None,
              what: str) -> tuple[dict[str, Any], Any]:
        try:
            return self._gi.requester.requestJsonAndCheck(verb, url, parameters=params)
        except GithubException as exc:
            msg = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else "")
            cls = (GitHubRetryableError
                   if exc.status >= 500 or exc.status in (403, 429) else GitHubError)
            raise cls(f"{what}: GitHub answered {exc.status}: {msg}", exc.status) from exc
        except OSError as exc:  # requests' ConnectionError/Timeout are OSErrors
            raise GitHubRetryableError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _header(headers: dict[str, Any], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name:
            return str(v)
    return None


def _remaining(headers: dict[str, Any]) -> int | None:
    v = _header(headers, "x-ratelimit-remaining")
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
