"""Screens and the per-pool queue, stored in the database.

A *screen* is one A/B run of a candidate (or of the control against itself) on one track,
requested by ``/screen`` on a PR.  Screens of one hardware pool run one at a time: a pool is a
reservation of whole machines, and GitHub Actions concurrency groups are not a queue (a newer
pending run replaces an older one), so the bot dispatches the next screen only when the pool
is free.

States and their moves::

    queued -> dispatched -> running -> finished | failed
    queued -> cancelled                  (record kept: by whom, when)
    dispatched | running -> cancelling -> failed (conclusion "cancelled")
    dispatched -> failed                 (watchdog: no run appeared)

Times are timezone-aware UTC; durations are seconds.  All functions take an open SQLAlchemy
``Session`` and leave committing to the caller, so one handler's writes land together.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import JSON, DateTime, Float, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from bot.database import Base
from bot.repo_config import SCREEN_WORKFLOW

QUEUED = "queued"
DISPATCHED = "dispatched"
RUNNING = "running"
CANCELLING = "cancelling"
FINISHED = "finished"
FAILED = "failed"
CANCELLED = "cancelled"

ACTIVE_STATES = (DISPATCHED, RUNNING, CANCELLING)
"""States in which a screen holds its pool."""
OPEN_STATES = (QUEUED, *ACTIVE_STATES)
"""States that reserve budget (not yet charged)."""
TERMINAL_STATES = (FINISHED, FAILED, CANCELLED)


def utcnow() -> datetime:
    """Timezone-aware current UTC time."""
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    """Treat naive datetimes read back from SQLite as UTC."""
    if dt is None or dt.tzinfo is not None:
        return dt
    return dt.replace(tzinfo=UTC)


class Screen(Base):
    """One requested screen and everything the bot learned about it."""

    __tablename__ = "screens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    pr_number: Mapped[int] = mapped_column(Integer)
    installation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    campaign: Mapped[str] = mapped_column(String(200), index=True)
    campaign_path: Mapped[str] = mapped_column(String(500))
    kind: Mapped[str] = mapped_column(String(16))  # candidate | control
    candidate: Mapped[str] = mapped_column(String(200))
    track: Mapped[str] = mapped_column(String(200))
    session_order: Mapped[str] = mapped_column(String(64))
    pool: Mapped[str] = mapped_column(String(200), index=True)
    workflow: Mapped[str] = mapped_column(String(200), default=SCREEN_WORKFLOW)
    device_count: Mapped[int] = mapped_column(Integer, default=1)
    head_sha: Mapped[str] = mapped_column(String(40))
    head_repo: Mapped[str | None] = mapped_column(String(200), nullable=True)
    from_fork: Mapped[bool] = mapped_column(default=False)
    requested_by: Mapped[str] = mapped_column(String(100))
    authorised_as: Mapped[str] = mapped_column(String(16), default="write")
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    source_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True, default=QUEUED)
    estimate_device_s: Mapped[float] = mapped_column(Float)
    estimate_wall_s: Mapped[float] = mapped_column(Float)
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    run_url: Mapped[str | None] = mapped_column(String(500), nullable=True)
    runner_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    check_run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status_body: Mapped[str | None] = mapped_column(Text, nullable=True)
    status_posted_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    result_comment_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    conclusion: Mapped[str | None] = mapped_column(String(32), nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    cancelled_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    charged_device_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    charged_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)

    @property
    def label(self) -> str:
        """Short id shown to users, e.g. ``S12``."""
        return f"S{self.id}"

    @property
    def name(self) -> str:
        """Candidate name, or ``control`` for a repeatability screen."""
        return self.candidate if self.kind == "candidate" else "control"


@dataclass(frozen=True)
class QueuePlace:
    """Where a screen stands in its pool: 1-based ``position`` among the pool's queued
    screens (0 when it holds the pool), and the estimated start (UTC)."""

    position: int
    ahead: int
    estimated_start: datetime


def new_request_id() -> str:
    """A fresh correlation id for dispatch inputs and ``run-name`` (UUID4 hex)."""
    return uuid.uuid4().hex


def pool_active(db: Session, pool: str) -> Screen | None:
    """The screen currently holding ``pool`` (dispatched, running or cancelling), if any."""
    return db.scalars(
        select(Screen).where(Screen.pool == pool, Screen.state.in_(ACTIVE_STATES)).limit(1)
    ).first()


def pool_queue(db: Session, pool: str) -> list[Screen]:
    """Queued screens of ``pool`` in the order they will run (first come, first served)."""
    return list(
        db.scalars(
            select(Screen).where(Screen.pool == pool, Screen.state == QUEUED).order_by(Screen.id)
        )
    )


def _ceil_minutes(t: datetime, step: int = 10) -> datetime:
    """``t`` rounded up to the next ``step`` minutes (keeps overdue estimates from changing
    on every status render, which would edit the comment needlessly)."""
    base = t.replace(second=0, microsecond=0)
    extra = (-base.minute) % step
    if extra == 0 and t > base:
        extra = step
    return base + timedelta(minutes=extra)


def expected_free_at(s: Screen, now: datetime) -> datetime:
    """When ``s`` is expected to free its pool: its start plus its estimated wall time, or
    (when that has passed) ``now`` rounded up to 10 minutes."""
    began = aware(s.started_at) or aware(s.dispatched_at)
    if s.state == QUEUED or began is None:
        return now + timedelta(seconds=s.estimate_wall_s)
    end = began + timedelta(seconds=s.estimate_wall_s)
    return end if end > now else _ceil_minutes(now)


def place(db: Session, screen: Screen, now: datetime | None = None) -> QueuePlace:
    """Position and estimated start of ``screen`` in its pool's queue.

    The estimate is when the pool's active screen is expected to end (its start plus its
    estimate) plus the estimated wall time of every queued screen ahead (estimates from
    :mod:`bot.features.screen.budget`); it does not move with the clock unless the active
    screen is overdue.
    """
    now = now or utcnow()
    if screen.state in ACTIVE_STATES:
        return QueuePlace(0, 0, aware(screen.started_at) or aware(screen.dispatched_at) or now)
    active = pool_active(db, screen.pool)
    start = expected_free_at(active, now) if active is not None else now
    ahead = [s for s in pool_queue(db, screen.pool) if s.id < screen.id]
    start += timedelta(seconds=sum(s.estimate_wall_s for s in ahead))
    if active is None and not ahead:
        start = now
    return QueuePlace(len(ahead) + 1, len(ahead), start)


def next_to_dispatch(db: Session, pool: str) -> Screen | None:
    """The queued screen to dispatch now, or None when the pool is busy or its queue empty."""
    if pool_active(db, pool) is not None:
        return None
    q = pool_queue(db, pool)
    return q[0] if q else None


def by_label(db: Session, repo: str, screen_id: int) -> Screen | None:
    """The screen with numeric id ``screen_id`` in ``repo`` (None if absent or elsewhere)."""
    s = db.get(Screen, screen_id)
    return s if s is not None and s.repo == repo else None


def by_run(db: Session, repo: str, run_id: int | None, title: str | None) -> Screen | None:
    """Find the screen of a workflow run: by run id (from ``return_run_details``), else by
    the request id carried in the run's ``display_title`` (the workflow's ``run-name``)."""
    if run_id is not None:
        s = db.scalars(select(Screen).where(Screen.repo == repo, Screen.run_id == run_id)).first()
        if s is not None:
            return s
    if title:
        for tok in title.replace("(", " ").replace(")", " ").split():
            if len(tok) == 32 and all(c in "0123456789abcdef" for c in tok):
                s = db.scalars(select(Screen).where(Screen.request_id == tok)).first()
                if s is not None and s.repo == repo:
                    return s
    return None


def cancel_queued(db: Session, screen: Screen, by: str, now: datetime | None = None) -> None:
    """Take a queued screen out of its queue; the record stays (cancelled, by whom, when)."""
    if screen.state != QUEUED:
        raise ValueError(f"{screen.label} is {screen.state}, not queued")
    screen.state = CANCELLED
    screen.cancelled_by = by
    screen.cancelled_at = now or utcnow()
    screen.conclusion = "cancelled"


def open_screens(db: Session, repo: str, pr_number: int | None = None) -> Sequence[Screen]:
    """Queued and active screens of ``repo`` (optionally of one PR), oldest first."""
    q = select(Screen).where(Screen.repo == repo, Screen.state.in_(OPEN_STATES))
    if pr_number is not None:
        q = q.where(Screen.pr_number == pr_number)
    return list(db.scalars(q.order_by(Screen.id)))


def recent_screens(db: Session, repo: str, pr_number: int, limit: int = 10) -> list[Screen]:
    """The PR's latest screens (any state), newest first."""
    q = (
        select(Screen)
        .where(Screen.repo == repo, Screen.pr_number == pr_number)
        .order_by(Screen.id.desc())
        .limit(limit)
    )
    return list(db.scalars(q))


def observed_session_device_s(db: Session, campaign: str, track: str) -> float | None:
    """Median charged device seconds per session of the campaign's finished screens on
    ``track`` (None before the first one); :mod:`bot.features.screen.budget` prefers it to the
    defaults."""
    rows = db.scalars(
        select(Screen).where(
            Screen.campaign == campaign,
            Screen.track == track,
            Screen.state == FINISHED,
            Screen.charged_device_s.is_not(None),
        )
    ).all()
    per = [r.charged_device_s / len(r.session_order) for r in rows if r.charged_device_s]
    return statistics.median(per) if per else None
