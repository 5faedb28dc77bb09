"""Screens and the per-pool queue, stored in the database.

A *screen* is one A/B run of a candidate (or of the control against itself) on one track,
requested by ``/screen`` on a PR.  Screens of one hardware pool run one at a time: a pool is a
reservation of whole machines, and GitHub Actions concurrency groups are not a queue (a newer
pending run replaces an older one), so the bot dispatches the next screen only when the pool
is free.

States and their moves::

    queued -> dispatched -> running -> finished | failed
    queued -> cancelled                  (record kept: by whom, when; also when the PR closes)
    dispatched | running -> cancelling -> failed (conclusion "cancelled")
    dispatched -> failed                 (watchdog: no run appeared)

A screen leaves ``queued`` only through :func:`claim`: one conditional ``UPDATE ... WHERE
state = 'queued'``, before any GitHub call, under a partial unique index that allows one
active screen per pool (``uq_screens_one_active_per_pool``).  So two callers racing (two
worker processes, a webhook and the watchdog) never dispatch one screen twice nor two screens
onto one pool, on SQLite and PostgreSQL alike.

One command in one comment is at most one request: :class:`ScreenCommand` rows are unique by
repository, comment id and the SHA-256 of the command's text (:func:`claim_command`), so a
second delivery of the same comment, or an edit that keeps the command, queues nothing.

Times are timezone-aware UTC; durations are seconds.  All functions take an open SQLAlchemy
``Session`` and leave committing to the caller, so one handler's writes land together.
"""

from __future__ import annotations

import hashlib
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
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

ONE_ACTIVE_PER_POOL = "state IN ('dispatched', 'running', 'cancelling')"
"""The partial unique index's condition: :data:`ACTIVE_STATES` as SQL."""


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
    __table_args__ = (
        Index("uq_screens_one_active_per_pool", "pool", unique=True,
              sqlite_where=text(ONE_ACTIVE_PER_POOL), postgresql_where=text(ONE_ACTIVE_PER_POOL)),
    )

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
    source_comment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    state: Mapped[str] = mapped_column(String(16), index=True, default=QUEUED)
    estimate_device_s: Mapped[float] = mapped_column(Float)
    estimate_wall_s: Mapped[float] = mapped_column(Float)
    run_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    run_url: Mapped[str | None] = mapped_column(String(500), nullable=True)
    runner_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    check_run_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status_comment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status_body: Mapped[str | None] = mapped_column(Text, nullable=True)
    status_posted_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    result_comment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
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
    control_revision: Mapped[str | None] = mapped_column(String(40), nullable=True)
    """A revision screen (``/compare``, ``/bisect``): the control arm's engine revision
    (None: the scope's commit)."""
    candidate_revision: Mapped[str | None] = mapped_column(String(40), nullable=True)
    """A revision screen: arm B runs the control config at this engine revision
    (:mod:`evidence.revisions`); None for every other screen."""
    bisection_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    """The ``/bisect`` this screen is a step of (:mod:`bot.features.screen.bisect`)."""

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


def by_request_id(db: Session, repo: str, request_id: str) -> Screen | None:
    """The screen with request id ``request_id`` (its check run's ``external_id``) in
    ``repo``; None for any other."""
    if not request_id:
        return None
    return db.scalars(select(Screen).where(Screen.repo == repo,
                                           Screen.request_id == request_id)).first()


def by_run(db: Session, repo: str, run_id: int | None) -> Screen | None:
    """The screen whose recorded workflow run (from the dispatch's run details, or found by
    its request id) is ``run_id`` in ``repo``; None for any other run."""
    if run_id is None:
        return None
    return db.scalars(select(Screen).where(Screen.repo == repo, Screen.run_id == run_id)).first()


def awaiting_run(db: Session, repo: str) -> list[Screen]:
    """Dispatched screens of ``repo`` whose run id is not known yet (GitHub answered the
    dispatch with an error, or without run details): matched to a run only by the screen
    workflow's path, the default branch and the request id (:func:`names_request`)."""
    return list(db.scalars(select(Screen).where(
        Screen.repo == repo, Screen.state == DISPATCHED, Screen.run_id.is_(None))))


def names_request(title: str | None, request_id: str) -> bool:
    """True when the run title ``title`` holds ``request_id`` as a word (the workflow's
    ``run-name`` carries it, e.g. ``screen x on t (PR #7, request 0f3c...)``)."""
    if not title:
        return False
    words = title.replace("(", " ").replace(")", " ").replace(",", " ").split()
    return request_id in words


def claim(db: Session, screen_id: int, now: datetime) -> bool:
    """Move queued screen ``screen_id`` to ``dispatched`` (no run yet) in one conditional
    UPDATE; True when this caller won it.  False when another caller claimed or cancelled it
    first, or when its pool already holds an active screen (the partial unique index refuses
    the UPDATE).  Commits or rolls back ``db``: call it before any GitHub request, alone in
    its transaction."""
    try:
        res = db.execute(
            update(Screen)
            .where(Screen.id == screen_id, Screen.state == QUEUED)
            .values(state=DISPATCHED, dispatched_at=now, detail=None)
            .execution_options(synchronize_session=False)
        )
        db.commit()
    except IntegrityError:
        db.rollback()
        return False
    return bool(getattr(res, "rowcount", 0) == 1)


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


class ScreenCommand(Base):
    """One state-changing command (``/screen candidate|control``, ``/campaign budget
    extend``) as run from one comment: unique by repository, comment id and the SHA-256 of
    the command's normalised text."""

    __tablename__ = "screen_commands"
    __table_args__ = (
        UniqueConstraint("repo", "comment_id", "command_sha256",
                         name="uq_screen_commands_comment_command"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200))
    comment_id: Mapped[int] = mapped_column(BigInteger)
    command_sha256: Mapped[str] = mapped_column(String(64))
    command: Mapped[str] = mapped_column(String(500))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


def command_key(command: str) -> str:
    """SHA-256 hex of a command's normalised text (a comment line may be 65,536 characters:
    an index holds the digest)."""
    return hashlib.sha256(command.encode("utf-8", "surrogatepass")).hexdigest()


def command_seen(db: Session, repo: str, comment_id: int, command: str) -> bool:
    """True when ``command`` from comment ``comment_id`` of ``repo`` was already run."""
    return db.scalars(select(ScreenCommand.id).where(
        ScreenCommand.repo == repo, ScreenCommand.comment_id == comment_id,
        ScreenCommand.command_sha256 == command_key(command))).first() is not None


def claim_command(db: Session, repo: str, comment_id: int, command: str,
                  now: datetime) -> bool:
    """Record ``command`` from comment ``comment_id`` of ``repo`` as run, in ``db``'s
    transaction; False when it was already recorded (by a rival transaction too: the unique
    constraint decides, the rival's insert waiting for this one's commit).

    One ``INSERT ... ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL), not a savepoint: on
    SQLite, pysqlite opens no transaction before the first write, so a SAVEPOINT issued as
    the transaction's first statement is a transaction of its own and its RELEASE committed
    the claim even when the handler's change was then rolled back (SQLAlchemy docs,
    "Serializable isolation / Savepoints / Transactional DDL" for pysqlite): the command
    would never run on redelivery."""
    values = {"repo": repo, "comment_id": comment_id, "command_sha256": command_key(command),
              "command": command[:500], "at": now}
    if db.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(ScreenCommand)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(ScreenCommand)
    stmt = stmt.values(**values).on_conflict_do_nothing().returning(ScreenCommand.id)
    return db.execute(stmt).scalar() is not None  # a row id: inserted; none: already there


def pool_waits(engine: Any) -> dict[str, tuple[int, float]]:
    """Every pool that has ever had a screen -> (screens queued now, seconds the oldest of
    them has waited since it was requested; 0 when none is queued), for ``/metrics``.  One
    grouped query on the ``screens`` table; ``engine`` a SQLAlchemy Engine."""
    from sqlalchemy import case, func

    now = utcnow()
    queued = case((Screen.state == QUEUED, 1), else_=0)
    oldest = func.min(case((Screen.state == QUEUED, Screen.requested_at), else_=None))
    with Session(engine) as db:
        rows = db.execute(select(Screen.pool, func.sum(queued), oldest)
                          .group_by(Screen.pool)).all()
    out: dict[str, tuple[int, float]] = {}
    for pool, n, first in rows:
        if isinstance(first, str):  # SQLite returns MIN() of a datetime column as text
            first = datetime.fromisoformat(first)
        since = aware(first)
        out[pool] = (int(n or 0), max((now - since).total_seconds(), 0.0) if since else 0.0)
    return out
