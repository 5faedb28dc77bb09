"""What the /screen flow tells the rest of the bot (:mod:`bot.events`): the notices of a
finished or failed screen, a changed verdict, a stuck queue, a budget at 80 % or exhausted,
and a fork's screen awaiting approval.  Each is emitted with the session of the change it
reports (:attr:`.runtime.Runtime.emit`), keyed so that the same happening reported twice (a
redelivered webhook, the watchdog after a lost one) is one notice.

Every notice links to where its result is: the screen's result comment, else its PR.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot import events
from bot.events import Notice
from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import Runtime

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., None])

BUDGET_WARN_FRACTION = 0.8
"""A campaign's charged wall- or device-hours at this share of the ceiling is notified once
per ceiling (an extension raises the ceiling and re-arms it)."""


def pr_url(rt: Runtime, repo: str, number: int) -> str:
    """The web URL of PR ``number`` of ``repo`` (``CAMPAIGN_BOT_GITHUB_URL`` base)."""
    return f"{rt.options.web_url.rstrip('/')}/{repo}/pull/{number}"


def result_url(rt: Runtime, s: Screen) -> str:
    """Where ``s``'s result is: its result comment when there is one, else its PR."""
    url = pr_url(rt, s.repo, s.pr_number)
    return f"{url}#issuecomment-{s.result_comment_id}" if s.result_comment_id else url


def _quiet(fn: F) -> F:
    """Log, never raise: a notice is never worth failing the change it reports."""

    @functools.wraps(fn)
    def run(*args: Any, **kw: Any) -> None:
        try:
            fn(*args, **kw)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("screen notice %s not emitted", fn.__name__)

    return run  # type: ignore[return-value]


def _emit(rt: Runtime, db: Session, notice: Notice) -> None:
    if rt.emit is not None:
        rt.emit(db, notice)


@_quiet
def screen_done(rt: Runtime, db: Session, s: Screen, scope: object | None) -> None:
    """After :func:`.results.finish_screen`: ``screen_finished`` or ``screen_failed``;
    ``verdict_changed`` when the previous finished screen of the same candidate (or control)
    on the same track of the campaign had another verdict; the budget notices when
    ``scope`` (the campaign's :class:`evidence.models.CampaignScope`, None: not readable)
    is given."""
    what = f"{s.name} on {s.track}"
    url = result_url(rt, s)
    if s.state == screens.FINISHED:
        _emit(rt, db, Notice(
            events.SCREEN_FINISHED, s.repo, f"screen-finished/{s.repo}/{s.request_id}",
            f"Screen {s.label} finished: {s.verdict}", f"{what}, campaign {s.campaign}.",
            url, s.campaign))
        prev = db.scalar(select(Screen.verdict).where(
            Screen.repo == s.repo, Screen.campaign == s.campaign, Screen.track == s.track,
            Screen.kind == s.kind, Screen.candidate == s.candidate,
            Screen.state == screens.FINISHED, Screen.id < s.id).order_by(Screen.id.desc())
            .limit(1))
        if prev is not None and prev != s.verdict:
            _emit(rt, db, Notice(
                events.VERDICT_CHANGED, s.repo, f"verdict-changed/{s.repo}/{s.request_id}",
                f"Verdict changed: {what}: {prev} -> {s.verdict}",
                f"Screen {s.label}, campaign {s.campaign}.", url, s.campaign))
    else:
        screen_failed(rt, db, s)
    if scope is not None:
        budget_notices(rt, db, s, scope)


@_quiet
def screen_failed(rt: Runtime, db: Session, s: Screen) -> None:
    """``screen_failed`` for ``s`` (its ``detail`` says why)."""
    _emit(rt, db, Notice(
        events.SCREEN_FAILED, s.repo, f"screen-failed/{s.repo}/{s.request_id}",
        f"Screen {s.label} failed: {s.name} on {s.track}",
        (s.detail or s.conclusion or "failed")[:500], result_url(rt, s), s.campaign))


@_quiet
def queue_stuck(rt: Runtime, db: Session, s: Screen, what: str) -> None:
    """``queue_stuck``: ``s`` was dispatched to its pool and no runner took it (``what``)."""
    _emit(rt, db, Notice(
        events.QUEUE_STUCK, s.repo, f"queue-stuck/{s.repo}/{s.request_id}",
        f"Pool {s.pool} stuck: screen {s.label} never started", f"{what}.",
        result_url(rt, s), s.campaign))


@_quiet
def budget_notices(rt: Runtime, db: Session, s: Screen, scope: object) -> None:
    """``budget_exhausted`` when the campaign's charged wall- or device-hours reach the
    ceiling, else ``budget_80`` at :data:`BUDGET_WARN_FRACTION`; once per resource and
    ceiling."""
    st = budget.state(db, s.repo, scope)
    for resource, used, ceiling in (("device-hours", st.device_used_h, st.device_ceiling_h),
                                    ("wall-hours", st.wall_used_h, st.wall_ceiling_h)):
        if ceiling <= 0:
            continue
        share = used / ceiling
        kind = (events.BUDGET_EXHAUSTED if share >= 1.0 else
                events.BUDGET_80 if share >= BUDGET_WARN_FRACTION else None)
        if kind is None:
            continue
        _emit(rt, db, Notice(
            kind, s.repo, f"{kind}/{s.repo}/{s.campaign}/{resource}/{ceiling:g}",
            f"Campaign {s.campaign}: {share:.0%} of {resource} used",
            f"{used:.2f} of {ceiling:.2f} {resource} charged (after screen {s.label}).",
            pr_url(rt, s.repo, s.pr_number), s.campaign))


@_quiet
def fork_awaiting_approval(rt: Runtime, repo: str, number: int, head_sha: str,
                           campaign: str | None) -> None:
    """``fork_awaiting_approval``: a screen was asked for on fork PR ``number`` whose head
    ``head_sha`` nobody with write permission has approved yet (own transaction)."""
    if rt.emit is None:
        return
    with rt.db() as db:
        _emit(rt, db, Notice(
            events.FORK_AWAITING_APPROVAL, repo,
            f"fork-approval/{repo}/{number}/{head_sha}",
            f"Fork PR #{number} awaits approval of head {head_sha[:12]}",
            "A screen was asked for; someone with write permission must approve the head "
            "commit with /screen ... sha=<full SHA>.", pr_url(rt, repo, number), campaign))
