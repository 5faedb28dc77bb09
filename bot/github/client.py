"""The PyGithub client the adapter (:mod:`bot.github.pygithub`) runs on: its retry policy
(reads only, ``Retry-After`` bounded), its pacing, and how PyGithub's and requests'
exceptions become the port's errors (:class:`bot.github.port.GitHubError` and its kinds).
Why reads only and why these waits: the adapter's module docstring.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import requests
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import RateLimitExceededExceedsMaxWait, RateLimitExceededException

from bot.github.port import (
    GitHubError,
    GitHubNotFound,
    GitHubRetryableError,
    GitHubValidationError,
)

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""The only methods ever retried by the HTTP layer (writes are never blindly re-sent)."""


class BoundedGithubRetry(GithubRetry):
    """``GithubRetry`` whose ``Retry-After`` sleeps are bounded too.

    PyGithub applies ``max_rate_limit_wait`` to rate-limit resets only; a 403/429 carrying
    ``Retry-After`` is slept by urllib3 for whatever the header says.  Here a longer wait
    raises ``RateLimitExceededExceedsMaxWait`` (mapped to :class:`GitHubRetryableError` with
    ``retry_after``), so the delivery is retried later instead of a worker sleeping.
    """

    def get_retry_after(self, response: Any) -> float | None:  # type: ignore[override]
        wait = super().get_retry_after(response)
        limit = self.max_rate_limit_wait
        if wait is not None and limit is not None and wait > limit:
            raise RateLimitExceededExceedsMaxWait(
                response.status, {"message": "Retry-After exceeds max_rate_limit_wait"},
                dict(response.headers), wait=wait)
        return wait


def make_retry(
    *,
    total: int = 4,
    backoff_factor: float = 1.0,
    secondary_rate_wait: float = 60.0,
    max_rate_limit_wait: float = 120.0,
) -> GithubRetry:
    """A :class:`BoundedGithubRetry` that retries reads only.

    ``total`` attempts after the first; ``backoff_factor`` seconds grow exponentially
    between 5xx retries; a secondary rate limit without ``Retry-After`` waits
    ``secondary_rate_wait`` s (GitHub: "wait at least one minute", GitHub Docs "Rate limits
    for the REST API"); a wait longer than ``max_rate_limit_wait`` s raises instead of sleeping
    (so a webhook worker does not sleep for an hour; the delivery is retried later instead).
    """
    return BoundedGithubRetry(
        total=total,
        backoff_factor=backoff_factor,
        allowed_methods=READ_METHODS,
        secondary_rate_wait=secondary_rate_wait,
        max_rate_limit_wait=max_rate_limit_wait,
    )


def make_client(
    base_url: str,
    auth: Auth.Auth,
    *,
    retry: GithubRetry | None = None,
    throttle: bool = True,
    timeout: float = 30.0,
) -> Github:
    """A PyGithub client: lazy objects, 100 per page, read-only retries.

    ``throttle`` paces requests: 1 s between writes (GitHub's best practices ask for at least
    1 s between mutating requests: GitHub Docs, "Best practices for using the REST API") and
    0.05 s between any two requests (PyGithub's default 0.25 s made one review of a 30-file
    campaign take 18 s, of which 15 s idle; 20 reads/s stays far below the 900 points/min
    per-endpoint secondary limit).
    Tests turn it off.
    """
    kwargs: dict[str, Any] = {"seconds_between_requests": 0.05, "seconds_between_writes": 1.0}
    if not throttle:
        kwargs.update(seconds_between_requests=None, seconds_between_writes=None)
    return Github(
        auth=auth,
        base_url=base_url.rstrip("/"),
        lazy=True,
        per_page=100,
        retry=retry if retry is not None else make_retry(),
        timeout=int(timeout),
        **kwargs,
    )


def _retry_after(exc: GithubException) -> float | None:
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    ra = headers.get("retry-after")
    if ra is not None:
        try:
            return float(ra)
        except ValueError:
            return None
    if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset"):
        try:
            return max(0.0, float(headers["x-ratelimit-reset"]) - time.time()) + 1.0
        except ValueError:
            return None
    return None


def map_exception(exc: BaseException, what: str) -> GitHubError:
    """Translate a PyGithub / requests exception into this module's error types: rate limits,
    429, 5xx, a 403 with a wait, and network errors are :class:`GitHubRetryableError` (with
    ``retry_after`` seconds when GitHub said); 404 :class:`GitHubNotFound`; 422
    :class:`GitHubValidationError`; anything else :class:`GitHubError`.  ``what`` (the port
    call) begins the message."""
    if isinstance(exc, GitHubError):
        return exc
    if isinstance(exc, RateLimitExceededExceedsMaxWait):
        return GitHubRetryableError(f"{what}: rate limited by GitHub", exc.status,
                                    retry_after=getattr(exc, "wait", None))
    if isinstance(exc, RateLimitExceededException):
        return GitHubRetryableError(f"{what}: rate limited by GitHub", exc.status,
                                    retry_after=_retry_after(exc))
    if isinstance(exc, GithubException):
        return _from_status(exc, what)
    if isinstance(exc, requests.exceptions.RequestException):
        return GitHubRetryableError(f"{what}: {type(exc).__name__}: {exc}")
    return GitHubError(f"{what}: {type(exc).__name__}: {exc}")


_BY_STATUS: Mapping[int | None, type[GitHubError]] = MappingProxyType(
    {404: GitHubNotFound, 422: GitHubValidationError})
"""Statuses with an error type of their own (the rest are :class:`GitHubError`)."""


def _from_status(exc: GithubException, what: str) -> GitHubError:
    data = exc.data if isinstance(exc.data, dict) else {}
    text = f"{what}: GitHub answered {exc.status}: {exc.message or data.get('message') or ''}"
    text = text.rstrip(": ")
    if data.get("errors"):
        text += f" ({data['errors']})"
    status, wait = exc.status, _retry_after(exc)
    if status == 429 or (status is not None and status >= 500) or (
            status == 403 and wait is not None):
        return GitHubRetryableError(text, status, retry_after=wait)
    return _BY_STATUS.get(status, GitHubError)(text, status)
