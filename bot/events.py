"""Happenings one feature reports and another acts on, without importing each other.

A feature that notices something people should hear about (a screen finished, a queue is
stuck, a budget is nearly used) builds a :class:`Notice` and hands it to
:meth:`Notices.emit` together with the database session of the change it reports; a feature
that acts on notices (:mod:`bot.features.notify`) subscribes with :meth:`Notices.subscribe`.
The composition root (:mod:`bot.app`) owns the one :class:`Notices` of an application
(:attr:`bot.registry.Registry.notices`).

Why the session travels with the notice: a subscriber that records the notice does so in the
same transaction as the change it reports (a transactional outbox), so a crash before that
commit leaves neither, and the redelivered webhook that redoes the change records the notice
once, and a crash after it leaves both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

VERDICT_CHANGED = "verdict_changed"
SCREEN_FINISHED = "screen_finished"
SCREEN_FAILED = "screen_failed"
QUEUE_STUCK = "queue_stuck"
BUDGET_80 = "budget_80"
BUDGET_EXHAUSTED = "budget_exhausted"
FORK_AWAITING_APPROVAL = "fork_awaiting_approval"

KINDS = (VERDICT_CHANGED, SCREEN_FINISHED, SCREEN_FAILED, QUEUE_STUCK, BUDGET_80,
         BUDGET_EXHAUSTED, FORK_AWAITING_APPROVAL)
"""Every notice kind, in the order the documentation lists them."""


@dataclass(frozen=True)
class Notice:
    """One happening worth telling people about.

    ``kind``: one of :data:`KINDS`.  ``repo``: ``owner/name`` it belongs to (only targets
    that repository's config names ever hear of it).  ``key``: unique per happening (e.g.
    ``screen-finished/octo/x/S4``): a second emit with the same key is the same happening,
    recorded once.  ``title``: one line; ``text``: a few lines, no secrets; ``url``: where the
    result is (every notification links to it).  ``campaign``: the campaign id, when there
    is one.
    """

    kind: str
    repo: str
    key: str
    title: str
    text: str
    url: str
    campaign: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown notice kind {self.kind!r}; known: {', '.join(KINDS)}")
        if not self.url:
            raise ValueError("a notice links to its result: url is empty")


Subscriber = Callable[[Session, Notice], object]
"""``def on_notice(db, notice)``: act on ``notice`` inside ``db``'s transaction (what it
returns is ignored)."""


@dataclass
class Notices:
    """The notice bus of one application: subscribers are called in order."""

    subscribers: list[Subscriber] = field(default_factory=list)

    def subscribe(self, fn: Subscriber) -> None:
        """Call ``fn(db, notice)`` for every notice emitted from now on."""
        self.subscribers.append(fn)

    def emit(self, db: Session, notice: Notice) -> None:
        """Hand ``notice`` to every subscriber, in ``db``'s transaction.  A subscriber that
        raises is logged and never stops the caller nor the other subscribers: a
        notification is never worth failing the change it reports."""
        for fn in self.subscribers:
            try:
                fn(db, notice)
            except Exception:  # noqa: BLE001 - see the docstring
                log.exception("notice %s (%s) not recorded by %s", notice.key, notice.kind,
                              getattr(fn, "__qualname__", fn))
