"""Per-pool queue and budget ledger against real SQLite (and PostgreSQL when present)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from screen_scope import make_scope
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from webhook_helpers import DB_KINDS

from bot.database import Base
from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path) -> Iterator[Session]:
    eng = create_engine(f"sqlite:///{tmp_path / 'q.sqlite3'}")
    Base.metadata.create_all(eng)
    with Session(eng) as s:
        yield s
    eng.dispose()


def add(db: Session, pool: str = "p", state: str = screens.QUEUED, wall: float = 3600.0,
        cand: str = "cache-dit", **kw) -> Screen:
    s = Screen(
        request_id=screens.new_request_id(), repo="o/r", pr_number=5, campaign="h3-ref2va",
        campaign_path="campaigns/h3", kind="candidate", candidate=cand, track="5s-lossless",
        session_order="ABBAAB", pool=pool, workflow="screen.yml", device_count=4, head_sha="a" * 40,
        requested_by="amy", authorised_as="write", requested_at=T0, state=state,
        estimate_wall_s=wall, estimate_device_s=wall * 4, **kw,
    )
    db.add(s)
    db.flush()
    return s


def test_one_screen_per_pool_and_positions(db: Session) -> None:
    a = add(db)
    b = add(db)
    c = add(db, pool="other")
    assert screens.next_to_dispatch(db, "p") is a
    a.state, a.dispatched_at = screens.DISPATCHED, T0
    assert screens.next_to_dispatch(db, "p") is None  # pool busy
    assert screens.next_to_dispatch(db, "other") is c  # other pools are independent
    pl = screens.place(db, b, now=T0 + timedelta(minutes=15))
    assert (pl.position, pl.ahead) == (1, 0)
    # a has 45 of its 60 estimated minutes left
    assert pl.estimated_start == T0 + timedelta(minutes=60)
    d = add(db, wall=1800)
    pl = screens.place(db, d, now=T0 + timedelta(minutes=15))
    assert (pl.position, pl.ahead) == (2, 1)
    assert pl.estimated_start == T0 + timedelta(minutes=120)


def test_cancel_keeps_record_and_frees_position(db: Session) -> None:
    a = add(db, state=screens.RUNNING, started_at=T0)
    b = add(db)
    c = add(db)
    screens.cancel_queued(db, b, "amy", now=T0)
    db.commit()
    got = db.get(Screen, b.id)
    assert (got.state, got.cancelled_by) == ("cancelled", "amy")
    assert screens.aware(got.cancelled_at) == T0
    assert screens.place(db, c, now=T0).position == 1
    with pytest.raises(ValueError, match="is running, not queued"):
        screens.cancel_queued(db, a, "amy")


def test_a_run_is_found_by_its_recorded_id_only(db: Session) -> None:
    a = add(db, run_id=99)
    b = add(db, state=screens.DISPATCHED, pool="q")
    assert screens.by_run(db, "o/r", 99) is a
    assert screens.by_run(db, "x/y", 99) is None
    assert screens.by_run(db, "o/r", None) is None
    # a title naming the request id is no match by itself: only screens still waiting for
    # their run id are offered, to be matched by workflow path, branch and request id
    assert screens.by_run(db, "o/r", 1234) is None
    assert screens.awaiting_run(db, "o/r") == [b]
    assert screens.names_request(f"screen cache-dit (PR #5, request {b.request_id})",
                                 b.request_id)
    assert not screens.names_request(f"screen cache-dit x{b.request_id}", b.request_id)
    assert not screens.names_request(None, b.request_id)


def test_estimate_from_protocol_then_from_observations(db: Session) -> None:
    scope = make_scope()
    est = budget.estimate_screen(db, scope, "5s-lossless", 6, 4)
    # per session: 600 start + 2 requests x 165 s/s x 5 s + 60 shutdown + 10 idle = 2320 s
    assert est.per_session_s == pytest.approx(2320.0)
    assert est.wall_s == pytest.approx(6 * 2320.0)
    assert est.device_s == pytest.approx(4 * 6 * 2320.0)
    assert est.basis.startswith("protocol")
    done = add(db, state=screens.FINISHED)
    budget.charge_screen(db, done, 3000.0, "success")
    est2 = budget.estimate_screen(db, scope, "5s-lossless", 6, 4)
    assert est2.per_session_s == pytest.approx(500.0)  # 3000 s / 6 sessions
    assert est2.basis.startswith("observed")
    with pytest.raises(KeyError, match="valid"):
        budget.estimate_screen(db, scope, "30s", 6, 4)


def test_budget_counts_charges_reservations_failures_and_extensions(db: Session) -> None:
    scope = make_scope()  # 2 directions, 16 wall-hours, 64 device-hours
    st = budget.state(db, "o/r", scope)
    assert (st.directions_left, st.wall_left_h, st.device_left_h) == (2, 16.0, 64.0)
    ok = add(db, state=screens.FINISHED)
    budget.record(db, "o/r", "h3-ref2va", "direction", "amy", "cache-dit", directions=1)
    budget.charge_screen(db, ok, 2 * 3600, "success")
    bad = add(db, state=screens.FAILED)
    budget.charge_screen(db, bad, 3600, "failure")  # failures are charged
    add(db, wall=3600)  # queued: reserves 1 h wall, 4 device-hours
    st = budget.state(db, "o/r", scope)
    assert st.directions_used == 1 and st.directions_names == ("cache-dit",)
    assert st.wall_used_h == pytest.approx(3.0) and st.device_used_h == pytest.approx(12.0)
    assert st.wall_reserved_h == pytest.approx(1.0) and st.device_reserved_h == pytest.approx(4.0)
    assert st.device_left_h == pytest.approx(48.0) and st.failures_charged == 1
    assert budget.uses_new_direction(db, "o/r", "h3-ref2va", "fp8-attn")
    assert not budget.uses_new_direction(db, "o/r", "h3-ref2va", "cache-dit")
    budget.record(db, "o/r", "h3-ref2va", "direction", "amy", "fp8-attn", directions=1)
    st = budget.state(db, "o/r", scope)
    est = budget.Estimate(50 * 3600, 200 * 3600, 6, 1, "x")
    reasons = budget.refusal(st, est, new_direction=True)
    assert reasons == [
        "candidate directions: all 2 used (cache-dit, fp8-attn)",
        "device-hours: this screen needs ~200.00 h, 48.00 h left of 64.00 h "
        "(12.00 h charged, 4.00 h reserved)",
        "wall-hours: this screen needs ~50.00 h, 12.00 h left of 16.00 h "
        "(3.00 h charged, 1.00 h reserved)",
    ]
    budget.record(db, "o/r", "h3-ref2va", "extend", "amy", "more", directions=1,
                  device_hours=200, wall_hours=40)
    st = budget.state(db, "o/r", scope)
    assert budget.refusal(st, est, new_direction=True) == []
    kinds = [e.kind for e in budget.history(db, "o/r", "h3-ref2va")]
    assert kinds == ["direction", "charge", "charge", "direction", "extend"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("device-hours=8", budget.Extension(0, 0.0, 8.0, "")),
        ("directions=2 wall-hours=4.5 reason=second round approved by Amy",
         budget.Extension(2, 4.5, 0.0, "second round approved by Amy")),
    ],
)
def test_parse_extend(text: str, expected: budget.Extension) -> None:
    assert budget.parse_extend(text) == expected


@pytest.mark.parametrize("text,msg", [
    ("", "nothing to extend"), ("hours=3", "unknown argument 'hours=3'"),
    ("device-hours=-1", "bad value"), ("directions=x", "bad value"),
])
def test_parse_extend_errors(text: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg) as ei:
        budget.parse_extend(text)
    assert "usage: /campaign budget extend" in str(ei.value)


@pytest.mark.parametrize("kind", DB_KINDS)
def test_a_claim_rolled_back_with_its_transaction_is_not_kept(kind: str, tmp_path) -> None:
    """A command claimed in a transaction that then rolls back (a crash of the handler after
    the claim) must be run again on redelivery: the claim goes with the transaction.  On
    SQLite, pysqlite opens no transaction before the first write, so a SAVEPOINT as the
    first statement was a transaction of its own and its RELEASE committed the claim."""
    from webhook_helpers import database_url

    from bot.database import make_engine

    with database_url(kind, tmp_path) as url:
        engine = make_engine(url)
        Base.metadata.create_all(engine)
        _claim_and_roll_back(engine)
        engine.dispose()


def _claim_and_roll_back(engine) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with Session(engine) as db:
        assert screens.claim_command(db, "o/r", 7, "/screen candidate a", now)
        db.rollback()
    with Session(engine) as db:
        assert not screens.command_seen(db, "o/r", 7, "/screen candidate a")
        assert screens.claim_command(db, "o/r", 7, "/screen candidate a", now)
        assert not screens.claim_command(db, "o/r", 7, "/screen candidate a", now)
        db.commit()
    with Session(engine) as db:
        assert screens.command_seen(db, "o/r", 7, "/screen candidate a")
