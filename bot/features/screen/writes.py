"""GitHub writes of the /screen flow, each made once (:func:`write_once`: GitHub may do a
write and still answer an error), the command's reply (:func:`port_replier`), and the
status comment of each screen, debounced (:func:`refresh_status`).

Status comment edits are debounced (at most one edit per screen per ``debounce_s`` while it
moves; the final state is always written): comment edits count against GitHub's secondary
rate limit for content creation (GitHub Docs, "Rate limits for the REST API").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import Replier, ScreenOptions, reply_context
from bot.github import Comment, GitHubError, GitHubPort
from bot.inbox.router import SECONDARY_RATE_WAIT_S
from bot.render import marker, render

log = logging.getLogger(__name__)
T = TypeVar("T")


def write_once(options: ScreenOptions, what: str, call: Callable[[], T],
               lookup: Callable[[], T | None] | None = None) -> T:
    """Make one GitHub write through ``call`` and return its result.

    GitHub may do a write and still answer an error (a 502 after the comment was stored, a
    dispatch answered 5xx after the run was created), so when a write fails with an error
    worth another try (:attr:`bot.github.GitHubError.retryable`: 5xx, a primary or secondary
    rate limit, no connection), ``lookup`` (if given) is asked whether the write exists; if it
    does, that is the result.  Otherwise the write is tried again, after the ``Retry-After``
    or rate-limit reset GitHub gave (a rate limit without either:
    :data:`bot.inbox.router.SECONDARY_RATE_WAIT_S`; else ``write_backoff_s``, doubling), at
    most ``write_retries`` times, and the lookup is asked again after each wait.  A wait
    longer than ``max_write_wait_s`` is not slept: the error is raised at once (the delivery
    is queued again after GitHub's reset without spending an attempt,
    :func:`bot.inbox.router.rate_limit_wait`).  Errors not worth a retry (4xx) are raised at
    once; so is the last one.  A lookup that fails itself makes the write's error the
    answer: without knowing, a second write could duplicate the first.
    """
    attempt = 0
    while True:
        try:
            return call()
        except GitHubError as exc:
            if not exc.retryable:
                raise
            error = exc
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            delay = retry_after
        elif error.status in (403, 429):  # a rate limit that did not say how long
            delay = SECONDARY_RATE_WAIT_S
        else:
            delay = options.write_backoff_s * (2 ** attempt)
        last = attempt >= options.write_retries or delay > options.max_write_wait_s
        if not last:
            log.warning("%s: GitHub answered %s; looking it up after %.1f s", what,
                        error.status or type(error).__name__, delay)
            time.sleep(max(0.0, delay))
        if lookup is not None:
            try:
                found = lookup()
            except GitHubError:
                log.exception("%s: the write could not be looked up", what)
                raise error from None
            if found is not None:
                log.warning("%s: GitHub answered %s, but the write was made", what,
                            error.status or type(error).__name__)
                return found
        if last:
            raise error
        attempt += 1


def find_comment(gh: GitHubPort, number: int, mark: str) -> Comment | None:
    """The bot's comment on issue/PR ``number`` carrying ``mark``: found by the marker AND
    the bot's login (a user quoting the marker is ignored); None when there is none."""
    for c in gh.list_issue_comments(number):
        if c.user == gh.bot_login and mark in c.body:
            return c
    return None


def post_comment_once(options: ScreenOptions, gh: GitHubPort, number: int, body: str,
                      mark: str) -> Comment:
    """Create the bot's comment carrying ``mark`` on ``number`` (:func:`write_once`; found by
    marker and login when GitHub answers an error after storing it).

    The marker is looked up *before* the first write too, and an existing comment is
    returned as it is: a retried or taken-over delivery (a replica killed after GitHub
    stored the comment and before its database commit recorded the comment's id, or GitHub
    redelivering the webhook) must not post a second one; it is edited to ``body`` when its
    text differs.  Costs one list call per post."""
    existing = find_comment(gh, number, mark)
    if existing is not None:
        log.warning("comment %s on #%s already exists (id %s): not posted again",
                    mark.strip(), number, existing.id)
        if existing.body.strip() != body.strip():
            edit_comment_once(options, gh, existing.id, body)
        return existing
    return write_once(options, f"comment {mark.strip()} on #{number}",
                      lambda: gh.create_issue_comment(number, body),
                      lambda: find_comment(gh, number, mark))


def edit_comment_once(options: ScreenOptions, gh: GitHubPort, comment_id: int,
                      body: str) -> None:
    """Replace the body of the bot's comment ``comment_id`` (an edit is idempotent: tried
    again as :func:`write_once` says)."""
    write_once(options, f"edit comment {comment_id}",
               lambda: gh.edit_issue_comment(comment_id, body))


# --------------------------------------------------------------------------------- replies


def port_replier(gh: GitHubPort, repo: str, number: int, comment_id: int | None) -> Replier:
    """A replier posting through ``gh`` (used where no command context exists)."""

    def say(kind: str, **ctx: Any) -> None:
        body = render("screen_reply.md.j2",
                      marker_text=marker("reply", comment=comment_id or 0, line=1),
                      **reply_context(kind, **ctx))
        gh.create_issue_comment(number, body)

    return say


def status_body(db: Session, s: Screen, now: datetime) -> str:
    """The status comment of ``s`` as it should read now."""
    return render("screen_status.md.j2", marker_text=marker("screen-status", screen=s.label),
                  s=s, place=screens.place(db, s, now))


def refresh_status(
    db: Session, gh: GitHubPort, s: Screen, now: datetime, options: ScreenOptions,
    force: bool = False,
) -> bool:
    """Create or edit the status comment of ``s`` when its text changed.  Returns True when
    a write was made.  Without ``force``, an edit within ``debounce_s`` of the previous one
    is deferred (the watchdog's flush job writes it later)."""
    body = status_body(db, s, now)
    if s.status_comment_id is not None and body == s.status_body:
        return False
    last = screens.aware(s.status_posted_at)
    if (
        not force
        and s.status_comment_id is not None
        and last is not None
        and (now - last).total_seconds() < options.debounce_s
    ):
        return False
    if s.status_comment_id is None:
        s.status_comment_id = post_comment_once(
            options, gh, s.pr_number, body, marker("screen-status", screen=s.label)).id
    else:
        edit_comment_once(options, gh, s.status_comment_id, body)
    s.status_body = body
    s.status_posted_at = now
    return True




def refresh_pool(
    db: Session, gh: GitHubPort, pool: str, now: datetime, options: ScreenOptions,
    except_id: int | None = None,
) -> None:
    """Queue positions moved: refresh the status of the pool's queued screens (same repo
    only through ``gh``; others are refreshed by the flush job)."""
    for q in screens.pool_queue(db, pool):
        if q.id != except_id:
            try:
                refresh_status(db, gh, q, now, options)
            except Exception:  # noqa: BLE001 - a status line is not worth failing the flow
                log.exception("status refresh of %s failed", q.label)
