"""The notification outbox: record a notice once, route it to the repository's targets, send
each at most once, outside quiet hours and within the rate limit.

1. :func:`record` (subscribed to :class:`bot.events.Notices`) adds the notice to
   ``notify_notices`` inside the transaction of the change it reports, unique by the notice's
   key: a redelivered webhook or the watchdog redoing the change finds the row (or, after a
   crash before the commit, finds nothing: the change and the notice were both lost and are
   both redone).  One notice per happening.
2. :meth:`Notifier.route` reads the repository's ``[notify]`` section (default branch) and
   adds one ``notify_sends`` row per named target that hears the kind; a target the config
   does not name never gets a row, so it never hears of the repository.
3. :meth:`Notifier.deliver` sends due rows, reading the ``[notify]`` section again first: a
   target the config no longer names for the kind is not sent to (``failed``).  Quiet hours
   *defer* (``not_before`` = the end of
   the quiet hours; nothing is dropped: a budget exhausted at 3 a.m. is still news at 7).  The
   rate limit (``max_per_hour`` per repository and target, any 60 minutes) also defers, to
   the moment the oldest send of the window is an hour old.  Each row is claimed with a
   conditional ``UPDATE ... WHERE state = 'pending'`` committed before the network call, so
   two passes never send one row twice.  A row found still ``sending`` after
   :data:`STALE_SENDING_S` (the process died during the call) becomes ``unknown`` and is
   never sent again: the target may have it already, and a duplicate is what this outbox
   exists to prevent; the log names it.

Everything is in the database (SQLite or PostgreSQL): a restart resumes where the last
process stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bot.events import Notice
from bot.features.notify import store
from bot.features.notify.send import Message, Outcome, send
from bot.features.notify.settings import NotifySettings, Target
from bot.features.notify.store import NoticeRow, SendRow
from bot.repo_config import NotifySection

log = logging.getLogger(__name__)

STALE_SENDING_S = 600.0
"""A row ``sending`` for longer than this (10 min, far above any send's timeout) was left by
a process that died during the call: marked ``unknown``, never sent again."""
RATE_WINDOW_S = 3600.0
"""The rate limit's window: ``max_per_hour`` sends in any 60 minutes."""
ROUTE_ATTEMPTS = 10
"""Passes that may fail to read a repository's config before its notice is skipped."""
BATCH = 100
RETENTION_S = 30 * 24 * 3600.0
"""Notices (and their sends) older than this (30 days) are deleted: their keys only need to
outlive a redelivery (GitHub keeps deliveries redeliverable for 3 days) and the watchdog's
recovery of a lost completion (hours)."""


def utcnow() -> datetime:
    """Timezone-aware now in UTC."""
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    """SQLite gives naive datetimes back: they are UTC."""
    return dt if dt is None or dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def record(db: Session, notice: Notice, now: datetime | None = None) -> bool:
    """Add ``notice`` to the outbox in ``db``'s transaction; False when its key is already
    there (the same happening, reported again).  A savepoint keeps a lost race (two
    transactions adding one key; the unique index decides) from spoiling ``db`` on PostgreSQL."""
    if db.scalar(select(NoticeRow.id).where(NoticeRow.key == notice.key)) is not None:
        return False
    row = NoticeRow(key=notice.key[:300], repo=notice.repo, kind=notice.kind,
                    campaign=notice.campaign, title=notice.title[:300],
                    text=notice.text[:4000], url=notice.url[:1000], state=store.NEW,
                    attempts=0, created_at=now or utcnow())
    bind = db.get_bind()
    if bind.dialect.name == "sqlite":
        # no savepoint: pysqlite opens no transaction before the first write, so a SAVEPOINT
        # issued before it is a transaction of its own and its RELEASE commits the row even
        # when the caller's change is rolled back (SQLAlchemy docs, "Serializable isolation /
        # Savepoints / Transactional DDL" for pysqlite).  SQLite has one writer at a time
        # (one serve per database file), so the lookup above sees every rival.
        db.add(row)
        db.flush()
        return True
    try:
        with db.begin_nested():
            db.add(row)
    except IntegrityError:
        return False
    return True


def quiet_until(now: datetime, quiet_hours: str, tz: str) -> datetime | None:
    """The end of the quiet hours ``HH:MM-HH:MM`` (local time in ``tz``) when ``now`` falls
    inside them, else None.  A window may wrap midnight (``22:00-07:00``); start == end is
    no window.  Returns UTC."""
    if not quiet_hours:
        return None
    start_s, end_s = quiet_hours.split("-")
    zone = ZoneInfo(tz)
    local = now.astimezone(zone)
    sh, sm = (int(x) for x in start_s.split(":"))
    eh, em = (int(x) for x in end_s.split(":"))
    start, end = sh * 60 + sm, eh * 60 + em
    t = local.hour * 60 + local.minute
    if start == end:
        return None
    inside = start <= t < end if start < end else (t >= start or t < end)
    if not inside:
        return None
    day = local.date() + timedelta(days=1) if start > end and t >= start else local.date()
    end_local = datetime(day.year, day.month, day.day, eh, em, tzinfo=zone)
    return end_local.astimezone(UTC)


SectionFor = Callable[[str], NotifySection | None]
"""``section_for(repo)``: the ``[notify]`` section of ``repo``'s config on its default branch;
None when the config is broken.  GitHub errors propagate."""


@dataclass
class Notifier:
    """Routes and sends the outbox on ``engine`` with the targets of ``settings``."""

    engine: Engine
    settings: NotifySettings
    section_for: SectionFor
    now: Callable[[], datetime] = utcnow
    sender: Callable[[Target, Message], Outcome] | None = None
    sent: list[str] = field(default_factory=list)
    """Ids of the sends made by this notifier (the log says the same)."""

    def _send(self, target: Target, m: Message) -> Outcome:
        if self.sender is not None:
            return self.sender(target, m)
        return send(target, m, timeout_s=self.settings.timeout_s)

    def run_pass(self) -> int:
        """Route new notices, then send what is due, then forget notices older than
        :data:`RETENTION_S`; returns the number sent."""
        self.route()
        sent = self.deliver()
        self.prune()
        return sent

    def prune(self) -> int:
        """Delete notices created more than :data:`RETENTION_S` ago, and their sends;
        returns the notices deleted."""
        cutoff = self.now() - timedelta(seconds=RETENTION_S)
        with Session(self.engine) as db:
            old = list(db.scalars(select(NoticeRow.id).where(NoticeRow.created_at < cutoff)
                                  .limit(1000)))
            if old:
                db.execute(delete(SendRow).where(SendRow.notice_id.in_(old)))
                db.execute(delete(NoticeRow).where(NoticeRow.id.in_(old)))
                db.commit()
        return len(old)

    def route(self) -> int:
        """One ``notify_sends`` row per target of each new notice's repository config that
        hears its kind (see the module docstring); returns the rows added."""
        now = self.now()
        added = 0
        with Session(self.engine) as db:
            rows = list(db.scalars(select(NoticeRow).where(NoticeRow.state == store.NEW)
                                   .order_by(NoticeRow.id).limit(BATCH)))
            sections: dict[str, NotifySection | None | Exception] = {}
            for n in rows:
                if n.repo not in sections:
                    sections[n.repo] = self._section(n.repo)
                sec = sections[n.repo]
                if isinstance(sec, Exception):
                    n.attempts += 1
                    n.detail = f"config not readable: {type(sec).__name__}"
                    if n.attempts >= ROUTE_ATTEMPTS:
                        n.state = store.SKIPPED
                    continue
                if sec is None:
                    n.state, n.detail = store.SKIPPED, "the repository config is broken"
                    n.routed_at = now
                    continue
                not_before = quiet_until(now, sec.quiet_hours, sec.timezone) or now
                for alias in sec.targets:
                    if not sec.hears(alias, n.kind):
                        continue
                    db.add(SendRow(notice_id=n.id, repo=n.repo, target=alias,
                                   state=store.PENDING, max_per_hour=sec.max_per_hour,
                                   not_before=not_before, attempts=0))
                    added += 1
                n.state, n.routed_at = store.ROUTED, now
            db.commit()
        return added

    def deliver(self) -> int:
        """Send every due ``pending`` row (see the module docstring); returns how many were
        sent."""
        now = self.now()
        n_sent = 0
        with Session(self.engine, expire_on_commit=False) as db:
            self._mark_stale(db, now)
            due = list(db.execute(select(SendRow, NoticeRow.kind).join(
                NoticeRow, NoticeRow.id == SendRow.notice_id).where(
                SendRow.state == store.PENDING, SendRow.not_before <= now)
                .order_by(SendRow.id).limit(BATCH)).all())
            sections: dict[str, NotifySection | None | Exception] = {}
            for row, kind in due:
                if row.repo not in sections:
                    sections[row.repo] = self._section(row.repo)
                if self._still_wanted(db, row, kind, sections[row.repo], now) and \
                        self._deliver_one(db, row, now):
                    n_sent += 1
        return n_sent

    def _section(self, repo: str) -> NotifySection | None | Exception:
        try:
            return self.section_for(repo)
        except Exception as exc:  # noqa: BLE001 - GitHub down: the next pass tries again
            return exc

    @staticmethod
    def _mark_stale(db: Session, now: datetime) -> None:
        """Rows left ``sending`` by a process that died during the call become ``unknown``."""
        stale = now - timedelta(seconds=STALE_SENDING_S)
        for row in db.scalars(select(SendRow).where(SendRow.state == store.SENDING)):
            if (aware(row.claimed_at) or now) < stale:
                row.state = store.UNKNOWN
                row.detail = "the process died while sending: not sent again"
                log.warning("notification %s to %s: outcome unknown, not sent again",
                            row.id, row.target)
        db.commit()

    @staticmethod
    def _still_wanted(db: Session, row: SendRow, kind: str,
                      sec: NotifySection | None | Exception, now: datetime) -> bool:
        """True when ``row`` may be sent now under the repository's current ``[notify]``
        section ``sec``: still named for ``kind`` (else ``failed``) and outside the quiet
        hours (else deferred to their end: a retry or the rate limit moved it there).
        False, row untouched, when the config could not be read."""
        if isinstance(sec, Exception):
            return False
        if sec is None or not sec.hears(row.target, kind):
            row.state = store.FAILED
            row.detail = ("the repository config is broken" if sec is None else
                          "the repository config no longer names this target for this event")
            db.commit()
            return False
        until = quiet_until(now, sec.quiet_hours, sec.timezone)
        if until is not None:
            row.not_before, row.detail = until, "quiet hours"
            db.commit()
            return False
        return True

    def _deliver_one(self, db: Session, row: SendRow, now: datetime) -> bool:
        target = self.settings.targets.get(row.target)
        if target is None or not target.allows(row.repo):
            row.state = store.FAILED
            row.detail = (f"target {row.target!r} is not in CAMPAIGN_BOT_NOTIFY_TARGETS"
                          if target is None else
                          f"CAMPAIGN_BOT_NOTIFY_TARGETS does not allow {row.repo} to use "
                          f"{row.target!r}")
            db.commit()
            log.warning("notification %s not sent: %s", row.id, row.detail)
            return False
        window = list(db.scalars(select(SendRow.sent_at).where(
            SendRow.repo == row.repo, SendRow.target == row.target,
            SendRow.state == store.SENT,
            SendRow.sent_at > now - timedelta(seconds=RATE_WINDOW_S))
            .order_by(SendRow.sent_at)))
        if len(window) >= row.max_per_hour:
            row.not_before = (aware(window[len(window) - row.max_per_hour]) or now) + timedelta(
                seconds=RATE_WINDOW_S)
            row.detail = f"rate limit: {row.max_per_hour} per hour"
            db.commit()
            return False
        claimed = db.execute(update(SendRow).where(
            SendRow.id == row.id, SendRow.state == store.PENDING).values(
            state=store.SENDING, claimed_at=now, attempts=SendRow.attempts + 1))
        db.commit()
        if getattr(claimed, "rowcount", 0) != 1:
            return False  # another pass took it
        notice = db.get(NoticeRow, row.notice_id)
        assert notice is not None
        m = Message(delivery=f"{notice.key}#{row.target}", kind=notice.kind, repo=notice.repo,
                    campaign=notice.campaign, title=f"[{notice.repo}] {notice.title}",
                    text=notice.text, url=notice.url, sent_at=self.now())
        out = self._send(target, m)
        db.refresh(row)
        if out.ok:
            row.state, row.sent_at, row.detail = store.SENT, m.sent_at, None
            self.sent.append(m.delivery)
            log.info("notification %s (%s) sent to %s", row.id, notice.kind, row.target)
        elif out.retry and row.attempts < self.settings.max_attempts:
            row.state = store.PENDING
            row.not_before = now + timedelta(minutes=2 ** (row.attempts - 1))
            row.detail = out.detail
            log.warning("notification %s to %s failed (%s); tried again later", row.id,
                        row.target, out.detail)
        else:
            row.state, row.detail = store.FAILED, out.detail
            log.warning("notification %s to %s given up: %s", row.id, row.target, out.detail)
        db.commit()
        return out.ok


def counts(engine: Engine) -> dict[str, int]:
    """``notify_sends`` rows per state (for tests and the operator)."""
    with Session(engine) as db:
        return {s: int(n) for s, n in db.execute(
            select(SendRow.state, func.count(SendRow.id)).group_by(SendRow.state))}
