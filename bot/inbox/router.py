"""Event routing: each feature's ``register()`` adds its handlers to the application's
:class:`Router`; the worker dispatches each stored delivery to every matching handler, in
registration order.

Handler signature, everywhere::

    def handle(event: Event, gh: GitHubPort, config: RepoConfig | None) -> None

``gh`` is the narrow GitHub port (:class:`bot.github.GitHubPort`), ``config`` the
repository's parsed ``.github/campaign-bot.toml`` from the default branch (None when absent or
broken; a broken config is reported by its own handler).  One failing handler never stops the
others: a user error becomes one short comment, anything else is logged with the delivery id
and never shown raw.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Handler = Callable[["Event", Any, Any], None]
"""``def handle(event, gh, config) -> None`` (blocking: run on the worker's thread pool)."""


@dataclass(frozen=True)
class Event:
    """One webhook delivery as handlers see it.

    ``name`` is the ``X-GitHub-Event`` header (e.g. ``issue_comment``), ``action`` the
    payload's ``action`` (None for events without one, e.g. ``push``), ``payload`` the parsed
    JSON body (unknown fields kept).
    """

    delivery_id: str
    name: str
    payload: dict[str, Any]

    @property
    def action(self) -> str | None:
        """The payload's ``action`` field, if any."""
        a = self.payload.get("action")
        return a if isinstance(a, str) else None

    @property
    def repo_full_name(self) -> str | None:
        """``owner/name`` of the repository the event concerns, if any."""
        repo = self.payload.get("repository") or {}
        name = repo.get("full_name")
        return name if isinstance(name, str) else None

    @property
    def installation_id(self) -> int | None:
        """GitHub App installation id, if the delivery came to an App."""
        inst = self.payload.get("installation") or {}
        iid = inst.get("id")
        return iid if isinstance(iid, int) else None

    @property
    def sender_login(self) -> str | None:
        """Login of the user or bot that caused the event."""
        s = self.payload.get("sender") or {}
        login = s.get("login")
        return login if isinstance(login, str) else None

    @property
    def sender_is_bot(self) -> bool:
        """True for ``type: Bot`` senders and ``...[bot]`` logins (their comments are ignored)."""
        s = self.payload.get("sender") or {}
        login = s.get("login") or ""
        return s.get("type") == "Bot" or login.endswith("[bot]")


@dataclass
class HandlerResult:
    """Outcome of one handler on one delivery; ``error`` is a one-line summary;
    ``permanent`` when retrying cannot succeed (:func:`permanent_reason`)."""

    handler: str
    ok: bool
    error: str | None = None
    permanent: bool = False
    rate_limited_s: float | None = None
    """Seconds GitHub asked to wait when the handler failed on a rate limit
    (:func:`rate_limit_wait`), else None."""


def permanent_reason(exc: BaseException) -> str | None:
    """Why retrying the delivery that raised ``exc`` cannot succeed, or None when it may:

    * GitHub answered 404 (the repository or object does not exist, or the installation
      cannot see it), 410 (gone) or 422 (the request is invalid): the same request gets the
      same answer (GitHub Docs, "Troubleshooting the REST API"); rate limits, 5xx and
      transport errors (:class:`bot.github.port.GitHubRetryableError`) stay transient;
    * the payload does not have the shape the handlers read
      (:class:`bot.inbox.payloads.PayloadShapeError`), or a handler met a value of the wrong
      type (``AttributeError``, ``TypeError``, ``KeyError``): the delivery's bytes never
      change, so neither does the outcome;
    * the service has no GitHub credentials (:class:`bot.github.port.GitHubNotConfigured`):
      nothing changes until the settings do (the delivery stays stored; ``campaign-bot
      replay --apply`` handles it once they are set)."""
    from bot.github.port import GitHubError, GitHubNotConfigured, GitHubRetryableError
    from bot.inbox.payloads import PayloadShapeError

    if isinstance(exc, GitHubRetryableError):
        return None
    if isinstance(exc, GitHubNotConfigured):
        return "no GitHub credentials configured"
    if isinstance(exc, GitHubError) and exc.status in (404, 410, 422):
        return f"GitHub answered {exc.status}"
    if isinstance(exc, PayloadShapeError):
        return "the payload has the wrong shape"
    if isinstance(exc, AttributeError | TypeError | KeyError):
        return "a value of the wrong shape"
    return None


SECONDARY_RATE_WAIT_S = 60.0
"""Wait after a rate limit answered without ``Retry-After`` or a reset: "wait at least one
minute before retrying" (GitHub Docs, "Rate limits for the REST API")."""


def rate_limit_wait(exc: BaseException) -> float | None:
    """Seconds to wait before the delivery that raised ``exc`` is tried again when GitHub
    refused the call for its rate limits (a primary or secondary rate-limit 403, or 429):
    the ``Retry-After`` or ``x-ratelimit-reset`` GitHub gave
    (:attr:`bot.github.port.GitHubRetryableError.retry_after`), else
    :data:`SECONDARY_RATE_WAIT_S`.  None for any other error (a 5xx, a lost connection).

    Such a wait is GitHub's pacing, not a failure of the delivery: the worker queues it
    again after the wait without spending one of its attempts."""
    from bot.github.port import GitHubRetryableError

    if not isinstance(exc, GitHubRetryableError) or exc.status not in (403, 429):
        return None
    if exc.retry_after is not None and exc.retry_after >= 0:
        return float(exc.retry_after)
    return SECONDARY_RATE_WAIT_S


@dataclass
class Router:
    """Registry of handlers keyed by ``(event name, action)``; action None matches any."""

    _handlers: list[tuple[str, str | None, Handler]] = field(default_factory=list)

    def on(self, event: str, *actions: str) -> Callable[[Handler], Handler]:
        """Decorator: register a handler for ``event`` with any of ``actions`` (all if none).

        Raises TypeError for a coroutine function: handlers are synchronous, and an
        ``async def`` one would return an unawaited coroutine and count as done."""

        def deco(fn: Handler) -> Handler:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(f"{fn.__qualname__}: handlers are synchronous functions "
                                "(def, not async def)")
            if actions:
                for a in actions:
                    self._handlers.append((event, a, fn))
            else:
                self._handlers.append((event, None, fn))
            return fn

        return deco

    def subscriptions(self) -> dict[str, tuple[str, ...] | None]:
        """``{event name: actions}`` the registered handlers listen to, sorted by event;
        actions None when some handler takes every action (what a GitHub App must subscribe
        to: App manifests subscribe by event, not action)."""
        out: dict[str, set[str] | None] = {}
        for name, action, _fn in self._handlers:
            if action is None:
                out[name] = None
            elif name not in out or out[name] is not None:
                out.setdefault(name, set()).add(action)  # type: ignore[union-attr]
        return {k: (None if v is None else tuple(sorted(v))) for k, v in sorted(out.items())}

    def handlers_for(self, event: Event) -> list[Handler]:
        """Handlers matching ``event``, in registration order, each once."""
        out: list[Handler] = []
        for name, action, fn in self._handlers:
            if name == event.name and (action is None or action == event.action):
                if fn not in out:
                    out.append(fn)
        return out

    def dispatch(self, event: Event, gh: Any, config: Any) -> list[HandlerResult]:
        """Run every matching handler; an exception in one is logged with the delivery id
        and recorded, and the others still run."""
        results: list[HandlerResult] = []
        for fn in self.handlers_for(event):
            name = f"{fn.__module__}.{fn.__qualname__}"
            try:
                fn(event, gh, config)
            except Exception as exc:  # noqa: BLE001 - one failing handler never stops others
                log.exception("handler %s failed on delivery %s", name, event.delivery_id)
                results.append(HandlerResult(name, False, f"{type(exc).__name__}: {exc}",
                                             permanent=permanent_reason(exc) is not None,
                                             rate_limited_s=rate_limit_wait(exc)))
            else:
                results.append(HandlerResult(name, True))
        return results

