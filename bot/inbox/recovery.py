"""Recovering missed webhook deliveries: GitHub never redelivers a failed delivery by itself
("GitHub does not automatically redeliver failed deliveries": GitHub Docs, "Handling failed
webhook deliveries"), so a delivery sent while every ``serve`` was down, or answered with an
error, would be lost.  A scheduled job (:func:`recover_missed`) reads the App's webhook log,
finds the deliveries that never got a 2xx answer and whose GUID (``X-GitHub-Delivery``) the
inbox does not hold, and asks GitHub to redeliver each one once.  The redelivery keeps the
GUID, so the inbox stores it like the original and processes it once.

The log is read back over the redelivery window only (3 days on github.com: "You can
redeliver webhook deliveries that occurred in the past 3 days", GitHub Docs, "Redelivering
webhooks"; ``window_s``), newest first, by a *scan* that may span several runs: each run
reads at most ``max_pages`` pages of 100 and saves where it stopped (the list endpoint's
``cursor``) in ``webhook_log_scan`` (Alembic ``0012_webhook_log_scan``); the next run resumes
there.  A scan ends at the window's edge, at the end of the log, or at the newest entry the
previous completed scan started from (those below were covered); the next run then starts a
new scan from the newest entry.  So every entry of the window is read, however many arrived
during an outage, with bounded work per run.  Per run at most ``max_requests`` redeliveries
are asked for, and the run stops while ``X-RateLimit-Remaining`` is below
``min_rate_remaining`` or on a rate-limit answer; the scan moves on only past pages whose
missing deliveries were all asked for.  Each GUID asked for is recorded in
``webhook_redeliveries`` (Alembic ``0010_webhook_redeliveries``) with the outcome:

* ``requested`` – GitHub accepted (202); asked again only when GitHub's log then shows the
  redelivery attempt itself failed (no replica answered it either) and the inbox still lacks
  the GUID, at most :data:`MAX_TRIES` times in all;
* ``refused`` – GitHub answered 4xx (e.g. 422, out of the window); never asked again;
* ``error`` – 5xx, rate limit or transport error; asked again on a later run, at most
  :data:`MAX_TRIES` times in all.

``campaign-bot deliveries --missing`` lists the table; ``/metrics`` counts it by outcome
(``campaign_bot_redeliveries``) and shows how many asked-for GUIDs have arrived.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    DateTime,
    Integer,
    String,
    Text,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, mapped_column

from bot.database import Base, utcnow
from bot.github.port import GitHubError, GitHubRetryableError, parse_timestamp
from bot.inbox.store import Delivery

log = logging.getLogger(__name__)

REDELIVERY_WINDOW_S = 3 * 24 * 3600.0
"""github.com keeps deliveries redeliverable for 3 days (GitHub Docs, "Redelivering
webhooks"); GitHub Enterprise Server 3.16+ for 7."""
MAX_TRIES = 3
"""Requests per GUID (ended in ``error``, or accepted but redelivered to no avail) before the
job stops asking."""
OUTCOMES = ("requested", "refused", "error")


class Redelivery(Base):
    """One GUID the job asked GitHub to redeliver (see module docstring)."""

    __tablename__ = "webhook_redeliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    guid: Mapped[str] = mapped_column(String(200), unique=True, nullable=False)
    hook_delivery_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    event: Mapped[str] = mapped_column(String(100), nullable=False)
    action: Mapped[str | None] = mapped_column(String(100))
    installation_id: Mapped[int | None] = mapped_column(BigInteger)
    failed_status_code: Mapped[int] = mapped_column(Integer, nullable=False)
    failed_status: Mapped[str | None] = mapped_column(String(300))
    delivered_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    requested_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    http_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    tries: Mapped[int] = mapped_column(Integer, nullable=False, default=1)


SCAN_NAME = "app"
"""The ``webhook_log_scan`` row of the App's webhook log."""


class LogScan(Base):
    """Where the scan of a webhook log stands (see :func:`recover_missed`): entries with an
    id up to ``floor_id`` were covered by the last completed scan; the scan in progress
    started at ``started_at`` from entry ``top_id`` downwards, read ``pages`` pages, and the
    next run resumes at ``cursor`` (the ``cursor`` query parameter of the list endpoint;
    None: a new scan starts from the newest entry)."""

    __tablename__ = "webhook_log_scan"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    cursor: Mapped[str | None] = mapped_column(String(200))
    top_id: Mapped[int | None] = mapped_column(BigInteger)
    floor_id: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    pages: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class WebhookLog(Protocol):
    """What the job needs of GitHub (:class:`bot.github.app_webhook.AppWebhookLog`)."""

    def pages(self, per_page: int = 100, cursor: str | None = None) -> Iterator[Any]:
        """Pages from ``cursor`` (None: the newest) with ``items`` (hook-delivery-item
        dicts, newest first), ``rate_remaining``, ``next_cursor`` and ``last``."""
        ...

    def redeliver(self, hook_delivery_id: int) -> int | None:
        """Ask for a redelivery; returns ``X-RateLimit-Remaining``."""
        ...


@dataclass
class RecoveryReport:
    """What one run did: log pages read (``pages``; ``resumed``: from a saved position),
    log items read within the scan, GUIDs without any 2xx attempt (``failed``), of those and
    of earlier ``error`` requests the ones to ask for (``missing``), redeliveries by outcome,
    whether the scan reached its end (``scan_complete``: the next run starts a new scan from
    the newest entry), and why the run stopped early (``stopped``, None when it finished)."""

    pages: int = 0
    resumed: bool = False
    scan_complete: bool = False
    scanned: int = 0
    failed: int = 0
    missing: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    stopped: str | None = None


def _ok(code: Any) -> bool:
    return isinstance(code, int) and 200 <= code < 300


def recover_missed(engine: Engine, hooks: WebhookLog, *, now: dt.datetime | None = None,
                   window_s: float = REDELIVERY_WINDOW_S, max_requests: int = 20,
                   max_pages: int = 10, min_rate_remaining: int = 100) -> RecoveryReport:
    """One run of the recovery job (see module docstring); returns its report.

    Reads at most ``max_pages`` pages of 100 log entries, from where the scan in progress
    stopped (``webhook_log_scan``; none: from the newest entry) down to the entries the last
    completed scan covered, entries older than ``window_s`` seconds or the end of the log;
    asks for at most ``max_requests`` redeliveries, oldest first (GUIDs whose request ended
    in ``error`` included, found in ``webhook_redeliveries``).  The scan moves on only when
    every missing delivery of the pages read was asked for, so a run cut short by the
    request bound or a rate limit reads the same pages again next time.  The run stops when
    ``X-RateLimit-Remaining`` drops below ``min_rate_remaining`` or GitHub answers with a
    rate limit.  A failure to read the log ends the run (``stopped``); nothing is lost, the
    next run reads again; a saved position GitHub refuses (4xx) is dropped and the next scan
    starts from the newest entry."""
    now = now or utcnow()
    horizon = now - dt.timedelta(seconds=window_s)
    rep = RecoveryReport()
    scan = _load_scan(engine)
    cursor = scan.cursor if scan is not None else None
    rd = _Reading.resuming(scan)
    rep.resumed = cursor is not None
    try:
        if not _read_log(hooks, cursor, horizon, rd, rep, max_pages, min_rate_remaining):
            return rep
    except GitHubError as exc:
        _log_unreadable(engine, exc, cursor, rd.floor, rep)
        return rep
    failed = rd.failed()
    rep.failed = len(failed)
    todo = _todo(engine, failed, horizon)
    rep.missing = len(todo)
    cut = _ask_for(engine, hooks, todo, rep, max_requests, min_rate_remaining)
    if cut or rd.last is None:
        return rep  # the same pages are read again next run
    _advance(engine, scan, rd, rep, now)
    return rep


@dataclass
class _Reading:
    """What one run read of the webhook log: ``top`` (the newest entry id of the scan),
    ``floor`` (the newest id the last completed scan covered), the delivery ``attempts``
    per GUID in the window, and the ``last`` page read."""

    floor: int | None
    top: int | None
    attempts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    last: Any = None

    @classmethod
    def resuming(cls, scan: Any) -> _Reading:
        """The start of a run after the saved ``scan`` (None: none saved): its floor, and
        its top when it stopped midway (a cursor saved)."""
        if scan is None:
            return cls(floor=None, top=None)
        return cls(floor=scan.floor_id, top=scan.top_id if scan.cursor is not None else None)

    def failed(self) -> dict[str, list[dict[str, Any]]]:
        """The GUIDs none of whose attempts GitHub delivered with a 2xx answer."""
        return {g: a for g, a in self.attempts.items()
                if not any(_ok(x.get("status_code")) for x in a)}


def _read_log(hooks: WebhookLog, cursor: str | None, horizon: dt.datetime, rd: _Reading,
              rep: RecoveryReport, max_pages: int, min_rate_remaining: int) -> bool:
    """Read pages of the log from ``cursor`` into ``rd`` (see :func:`recover_missed`); False
    when a rate limit ended the run (nothing more may be asked for)."""
    for page in hooks.pages(100, cursor):
        rep.pages += 1
        end = _take_page(page.items, horizon, rd, rep) or bool(page.last)
        rd.last = page
        if page.rate_remaining is not None and page.rate_remaining < min_rate_remaining:
            rep.stopped = f"rate limit: {page.rate_remaining} requests left"
            return False
        if end:
            rep.scan_complete = True
            break
        if rep.pages >= max_pages:
            rep.stopped = f"read {max_pages} pages of the webhook log (resumed next run)"
            break
    return True


def _take_page(items: list[dict[str, Any]], horizon: dt.datetime, rd: _Reading,
               rep: RecoveryReport) -> bool:
    """Add a page's delivery attempts within the window to ``rd``; True when the page
    reaches entries older than the window or covered by the last scan (the scan's end).
    The first page read sets the scan's ``top``."""
    ids = [x["id"] for x in items if isinstance(x.get("id"), int)]
    if rd.top is None and ids:
        rd.top = max(ids)
    end = False
    for item in items:
        where, t = _placed(item, horizon, rd.floor)
        if where == "end":
            end = True  # older than the window, or covered by the last scan
        elif where == "window":
            rep.scanned += 1
            rd.attempts.setdefault(item["guid"], []).append({**item, "_at": t})
    return end


def _placed(item: dict[str, Any], horizon: dt.datetime, floor: int | None
            ) -> tuple[str, dt.datetime | None]:
    """Where a log entry lies: ``("window", time)``, ``("end", time)`` (older than
    ``horizon`` or at most ``floor``, the last scan's newest id) or ``("skip", None)`` (no
    time, GUID or id)."""
    t = parse_timestamp(item.get("delivered_at"))
    if t is None or not isinstance(item.get("guid"), str) or not isinstance(item.get("id"), int):
        return "skip", None
    if t < horizon or (floor is not None and item["id"] <= floor):
        return "end", t
    return "window", t


def _log_unreadable(engine: Engine, exc: GitHubError, cursor: str | None, floor: int | None,
                    rep: RecoveryReport) -> None:
    """Say why the log could not be read; a saved position GitHub refused (4xx, before any
    page) is dropped, so the next scan starts from the newest entry."""
    if cursor is not None and rep.pages == 0 and not isinstance(exc, GitHubRetryableError):
        _save_scan(engine, cursor=None, top_id=None, floor_id=floor, started_at=None, pages=0)
        rep.stopped = (f"reading the webhook log at the saved position: {exc}; "
                       "the next run starts from the newest entry")
    else:
        rep.stopped = f"reading the webhook log: {exc}"
    log.warning("recovery of missed deliveries: %s", rep.stopped)


def _ask_for(engine: Engine, hooks: WebhookLog, todo: list[tuple[str, dict[str, Any],
             dict[str, Any], Any]], rep: RecoveryReport, max_requests: int,
             min_rate_remaining: int) -> bool:
    """Ask for the redelivery of each of ``todo``, recording each answer; True when the run
    stopped before asking for all of them (the request bound or a rate limit)."""
    for n, (guid, first, newest, prev) in enumerate(todo):
        if n >= max_requests:
            rep.stopped = f"asked for {max_requests} redeliveries (the per-run bound)"
            return True
        outcome, status, err, remaining = _redeliver(hooks, newest)
        _record(engine, guid, first, newest, outcome, status, err, prev=prev)
        rep.outcomes[outcome] = rep.outcomes.get(outcome, 0) + 1
        log.info("redelivery of %s (%s) %s%s", guid, first.get("event"), outcome,
                 f": {err}" if err else "")
        if outcome == "error" and status in (403, 429):
            rep.stopped = f"rate limit: {err}"
            return n + 1 < len(todo)
        if remaining is not None and remaining < min_rate_remaining:
            rep.stopped = f"rate limit: {remaining} requests left"
            return n + 1 < len(todo)
    return False


def _redeliver(hooks: WebhookLog, newest: dict[str, Any]
               ) -> tuple[str, int | None, str | None, int | None]:
    """Ask GitHub to redeliver log entry ``newest``: ``(outcome, HTTP status, error,
    requests left)`` with outcome ``requested``, ``error`` (worth asking again) or
    ``refused``."""
    try:
        return "requested", 202, None, hooks.redeliver(int(newest["id"]))
    except GitHubRetryableError as exc:
        return "error", exc.status, str(exc), None
    except GitHubError as exc:
        return "refused", exc.status, str(exc), None


def _advance(engine: Engine, scan: Any, rd: _Reading, rep: RecoveryReport,
             now: dt.datetime) -> None:
    """Move the saved scan on past the pages read: a completed scan becomes the floor of
    the next; an unfinished one resumes at the next page's cursor."""
    if rep.scan_complete:
        _save_scan(engine, cursor=None, top_id=None,
                   floor_id=rd.top if rd.top is not None else rd.floor, started_at=None,
                   pages=0)
    elif rd.last.next_cursor is None:
        log.warning("recovery of missed deliveries: the webhook log's next page has no "
                    "cursor; the next run starts from the newest entry")
    else:
        resumed = scan is not None and rep.resumed
        _save_scan(engine, cursor=rd.last.next_cursor, top_id=rd.top, floor_id=rd.floor,
                   started_at=(scan.started_at if resumed else None) or now,
                   pages=(scan.pages if resumed else 0) + rep.pages)


def _todo(engine: Engine, failed: dict[str, list[dict[str, Any]]],
          horizon: dt.datetime) -> list[tuple[str, dict[str, Any], dict[str, Any], Any]]:
    """The redeliveries to ask for, oldest first: ``(guid, first attempt, attempt to
    redeliver, webhook_redeliveries row or None)`` for each failed GUID the inbox lacks and
    :func:`_ask_again` allows, plus each GUID whose last request ended in ``error`` (its
    entries may lie in pages an earlier scan covered) and still within the window."""
    with engine.connect() as conn:
        held = set(conn.execute(
            select(Delivery.delivery_id).where(Delivery.delivery_id.in_(list(failed)))
        ).scalars()) if failed else set()
        settled = {r.guid: r for r in conn.execute(
            select(Redelivery.guid, Redelivery.outcome, Redelivery.tries,
                   Redelivery.hook_delivery_id)
            .where(Redelivery.guid.in_(list(failed))))} if failed else {}
        errors = conn.execute(
            select(Redelivery.guid, Redelivery.outcome, Redelivery.tries,
                   Redelivery.hook_delivery_id, Redelivery.event, Redelivery.delivered_at)
            .outerjoin(Delivery, Delivery.delivery_id == Redelivery.guid)
            .where(Redelivery.outcome == "error", Redelivery.tries < MAX_TRIES,
                   Delivery.delivery_id.is_(None))
            .order_by(Redelivery.id.desc()).limit(1000)).all()
    todo: list[tuple[str, dict[str, Any], dict[str, Any], Any]] = []
    for guid, tries in failed.items():
        prev = settled.get(guid)
        if guid in held or (prev is not None and not _ask_again(prev, tries)):
            continue
        # the oldest attempt: the original delivery (GitHub redelivers its payload)
        todo.append((guid, min(tries, key=lambda x: (x["_at"], x["id"])), tries[0], prev))
    for r in errors:
        at = r.delivered_at if r.delivered_at.tzinfo else r.delivered_at.replace(tzinfo=dt.UTC)
        if r.guid in failed or at < horizon:
            continue
        item = {"id": int(r.hook_delivery_id), "event": r.event, "_at": at}
        todo.append((r.guid, item, item, r))
    # oldest first (ids grow with time; delivered_at has 1 s resolution): GitHub sends the
    # redeliveries in the order asked, which keeps each installation's arrival order
    todo.sort(key=lambda t: (t[1]["_at"], t[1]["id"]))
    return todo


def _load_scan(engine: Engine) -> Any:
    """The ``webhook_log_scan`` row (attribute access), or None."""
    with engine.connect() as conn:
        return conn.execute(
            select(LogScan.cursor, LogScan.top_id, LogScan.floor_id, LogScan.started_at,
                   LogScan.pages).where(LogScan.name == SCAN_NAME)).first()


def _save_scan(engine: Engine, *, cursor: str | None, top_id: int | None,
               floor_id: int | None, started_at: dt.datetime | None, pages: int) -> None:
    values = {"cursor": cursor, "top_id": top_id, "floor_id": floor_id,
              "started_at": started_at, "pages": pages, "updated_at": utcnow()}
    with engine.begin() as conn:
        n = conn.execute(update(LogScan).where(LogScan.name == SCAN_NAME).values(**values))
        if not n.rowcount:
            conn.execute(insert(LogScan).values(name=SCAN_NAME, **values))


def scan_position(engine: Engine) -> dict[str, Any] | None:
    """The scan of the App's webhook log in progress, as a dict: ``cursor`` (where the next
    run resumes; None: it starts from the newest entry), ``top_id`` (newest entry id of the
    scan in progress), ``floor_id`` (newest entry id the last completed scan covered),
    ``started_at`` (ISO 8601, UTC) and ``pages`` read so far; None before the first run."""
    scan = _load_scan(engine)
    if scan is None:
        return None
    t = scan.started_at
    return {"cursor": scan.cursor, "top_id": scan.top_id, "floor_id": scan.floor_id,
            "started_at": (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).isoformat()
            if t is not None else None, "pages": scan.pages}


def _ask_again(prev: Any, tries: list[dict[str, Any]]) -> bool:
    """Whether a GUID asked for before (``prev``: its ``webhook_redeliveries`` row) is asked
    for again, given its attempts in the log (none answered 2xx): after an ``error``; after a
    ``requested`` only once the log holds an attempt newer than the one asked about (the
    redelivery was sent and failed too); never after ``refused``; :data:`MAX_TRIES` in all."""
    if prev.tries >= MAX_TRIES or prev.outcome == "refused":
        return False
    if prev.outcome == "error":
        return True
    return any(int(x["id"]) > int(prev.hook_delivery_id) for x in tries)


def _record(engine: Engine, guid: str, first: dict[str, Any], newest: dict[str, Any],
            outcome: str, status: int | None, err: str | None, *, prev: Any) -> None:
    now = utcnow()
    with engine.begin() as conn:
        if prev is not None:
            conn.execute(update(Redelivery).where(Redelivery.guid == guid).values(
                hook_delivery_id=int(newest["id"]), requested_at=now, outcome=outcome,
                http_status=status, error=err, tries=Redelivery.tries + 1))
            return
        action = first.get("action")
        inst = first.get("installation_id")
        conn.execute(insert(Redelivery).values(
            guid=guid, hook_delivery_id=int(newest["id"]), event=str(first.get("event") or "?"),
            action=action if isinstance(action, str) else None,
            installation_id=inst if isinstance(inst, int) else None,
            failed_status_code=int(newest.get("status_code") or 0),
            failed_status=str(newest.get("status") or "")[:300], delivered_at=first["_at"],
            requested_at=now, outcome=outcome, http_status=status, error=err, tries=1))


def redelivery_counts(engine: Engine) -> dict[str, int]:
    """Rows of ``webhook_redeliveries`` per outcome, plus ``arrived``: requested GUIDs the
    inbox now holds."""
    with engine.connect() as conn:
        out = {o: n for o, n in conn.execute(
            select(Redelivery.outcome, func.count()).group_by(Redelivery.outcome))}
        out["arrived"] = conn.execute(
            select(func.count()).select_from(Redelivery)
            .join(Delivery, Delivery.delivery_id == Redelivery.guid)).scalar_one()
    return out


def list_redeliveries(engine: Engine, limit: int = 50) -> list[dict[str, Any]]:
    """Newest requests first, as plain dicts; ``inbox_status`` is the status of the delivery
    with that GUID in the inbox (None: not arrived)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Redelivery.guid, Redelivery.event, Redelivery.action,
                   Redelivery.installation_id, Redelivery.failed_status_code,
                   Redelivery.failed_status, Redelivery.delivered_at, Redelivery.requested_at,
                   Redelivery.outcome, Redelivery.http_status, Redelivery.error,
                   Redelivery.tries, Delivery.status.label("inbox_status"))
            .outerjoin(Delivery, Delivery.delivery_id == Redelivery.guid)
            .order_by(Redelivery.id.desc()).limit(limit)).all()
    out = []
    for r in rows:
        d = r._asdict()
        for k in ("delivered_at", "requested_at"):
            t = d[k]
            d[k] = (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).isoformat()
        out.append(d)
    return out
