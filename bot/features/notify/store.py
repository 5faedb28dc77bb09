"""The notify feature's tables: an outbox of notices and one row per notice and target.

``notify_notices``: one row per happening, unique by its key (:attr:`bot.events.Notice.key`),
written in the transaction of the change it reports (the subscriber,
:func:`bot.features.notify.outbox.record`).  ``notify_sends``: one row per notice and target
alias, unique by both, made when the notice is routed through the repository's ``[notify]``
section; its state moves ``pending -> sending -> sent``, or back to ``pending`` with a later
``not_before`` (quiet hours, rate limit, a failed try), or ``failed`` (given up, alias not
configured or not allowed for the repository), or ``unknown`` (the process died while
sending: never sent again, see :mod:`bot.features.notify.outbox`).

Times are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.database import Base

NEW = "new"
ROUTED = "routed"
SKIPPED = "skipped"

PENDING = "pending"
SENDING = "sending"
SENT = "sent"
FAILED = "failed"
UNKNOWN = "unknown"


class NoticeRow(Base):
    """One recorded notice (see :class:`bot.events.Notice` for the fields)."""

    __tablename__ = "notify_notices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(300), unique=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(40))
    campaign: Mapped[str | None] = mapped_column(String(200), nullable=True)
    title: Mapped[str] = mapped_column(String(300))
    text: Mapped[str] = mapped_column(Text)
    url: Mapped[str] = mapped_column(String(1000))
    state: Mapped[str] = mapped_column(String(16), index=True, default=NEW)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    routed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SendRow(Base):
    """One notice to one target alias of its repository's ``[notify]`` section."""

    __tablename__ = "notify_sends"
    __table_args__ = (UniqueConstraint("notice_id", "target", name="uq_notify_sends_target"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    notice_id: Mapped[int] = mapped_column(Integer, index=True)
    repo: Mapped[str] = mapped_column(String(200))
    target: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), index=True, default=PENDING)
    max_per_hour: Mapped[int] = mapped_column(Integer)
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True,
                                                      index=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
