"""What a finished screen keeps for the next one (bot.features.screen.followup) on a real
SQLite database: when ``/screen continue`` may queue a follow-up and why it is refused, which
earlier receipts a follow-up or a confirmation is judged with, which candidates await
confirmation; and the runner's ``--follow-up`` value."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from _evidence_factory import scope, screen
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from bot.database import Base
from bot.features.screen import followup
from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from runners.screen import UsageError, parse_follow_up

T0 = datetime(2026, 12, 1, tzinfo=UTC)
BLOB = "b" * 40
SEQ = {"sequential": {"looks": 3, "max_sessions_per_arm": 9}}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Session]:
    eng = create_engine(f"sqlite:///{tmp_path / 'f.sqlite3'}")
    Base.metadata.create_all(eng)
    with Session(eng) as s:
        yield s
    eng.dispose()


def add(db: Session, summary: dict[str, Any] | None, state: str = screens.FINISHED,
        kind: str = "candidate") -> Screen:
    s = Screen(request_id=screens.new_request_id(), repo="o/r", pr_number=5,
               campaign="h3-test", campaign_path="campaigns/h3", kind=kind,
               candidate="rank-local", track="5s-lossless", session_order="ABBAAB", pool="p",
               workflow="screen.yml", device_count=4, head_sha="a" * 40, requested_by="amy",
               authorised_as="write", requested_at=T0, state=state, estimate_wall_s=60.0,
               estimate_device_s=240.0, summary=summary)
    db.add(s)
    db.flush()
    return s


def finished(verdict: str, sid: str = "s1", blob: str = BLOB, **more: Any) -> dict[str, Any]:
    rs = screen([100.0, 101.0, 102.0], [60.0, 60.5, 61.0], screen=sid)
    return {"verdict": verdict, "scope_blob": blob, "reasons": [],
            "receipts": followup.receipts_json(rs, "5s-lossless"),
            "followup": {"sessions_per_arm": 2, "look": 2, "probability": 0.9}, **more}


def test_follow_up_planned_from_the_projection(db: Session) -> None:
    s1 = add(db, finished("INCONCLUSIVE"))
    plan = followup.plan_followup(db, s1, scope(protocol=SEQ), BLOB)
    assert (plan.first.id, plan.look, plan.continues, plan.sessions, plan.order) == (
        s1.id, 2, "s1", 4, "ABBA")
    s2 = followup.new_followup(db, s1, plan, requested_by="amy", authorised_as="write",
                               head_sha="c" * 40, head_repo=None, from_fork=False,
                               comment_id=7, estimate=type("E", (), {"wall_s": 1.0,
                                                                    "device_s": 4.0})(),
                               now=T0)
    assert followup.follow_up_input(s2) == "2:s1" and followup.follow_up_input(s1) is None
    # while look 2 is queued, no second follow-up
    with pytest.raises(followup.FollowUpRefused, match="already queued as S2"):
        followup.plan_followup(db, s1, scope(protocol=SEQ), BLOB)
    # look 2 finished: it is judged with look 1's receipts, and only it may be continued
    s2.state = screens.FINISHED
    s2.summary = {**(s2.summary or {}), **finished("INCONCLUSIVE", "s2")}
    assert [r.screen_id for r in followup.prior_receipts(db, s2)] == ["s1"] * 6
    assert followup.first_look(db, s2).id == s1.id
    with pytest.raises(followup.FollowUpRefused, match="not the latest look"):
        followup.plan_followup(db, s1, scope(protocol=SEQ), BLOB)
    assert followup.plan_followup(db, s2, scope(protocol=SEQ), BLOB, sessions=6).look == 3


@pytest.mark.parametrize(("case", "message"), [
    ("no-design", "declares no \\[protocol.sequential\\] design"),
    ("scope-changed", "campaign.toml changed since the first look"),
    ("decided", "says SUPPORTED: the series has decided; `/screen confirm rank-local"),
    ("running", "is running: a follow-up continues a finished screen"),
    ("control", "control-vs-control screen"),
    ("no-projection", "projects no follow-up"),
], ids=["no-design", "scope-changed", "decided", "running", "control", "no-projection"])
def test_follow_up_refusals(db: Session, case: str, message: str) -> None:
    summary = finished("SUPPORTED", confirmation="provisional") if case == "decided" else (
        {**finished("INCONCLUSIVE"), "followup": None} if case == "no-projection"
        else finished("INCONCLUSIVE"))
    s = add(db, summary, state=screens.RUNNING if case == "running" else screens.FINISHED,
            kind="control" if case == "control" else "candidate")
    sc = scope() if case == "no-design" else scope(protocol=SEQ)
    blob = "d" * 40 if case == "scope-changed" else BLOB
    with pytest.raises(followup.FollowUpRefused, match=message):
        followup.plan_followup(db, s, sc, blob)


def test_looks_used_up(db: Session) -> None:
    s1 = add(db, finished("INCONCLUSIVE"))
    for look in (2, 3):
        add(db, {**finished("INCONCLUSIVE", f"s{look}"),
                 "plan": {"purpose": "followup", "first": s1.id, "look": look,
                          "continues": "s1"}})
    last = followup.series_screens(db, s1)[-1]
    with pytest.raises(followup.FollowUpRefused, match="has had its 3 looks"):
        followup.plan_followup(db, last, scope(protocol=SEQ), BLOB)


def test_confirmation_is_judged_with_every_earlier_screen_and_awaiting_is_listed(
        db: Session) -> None:
    s1 = add(db, finished("SUPPORTED", confirmation="provisional"))
    assert [a.label for a in followup.awaiting_confirmation(db, "o/r", "h3-test")] == ["S1"]
    s2 = add(db, {"plan": {"purpose": "confirm"}}, state=screens.QUEUED)
    assert followup.awaiting_confirmation(db, "o/r", "h3-test") == []  # one is open
    assert {r.screen_id for r in followup.prior_receipts(db, s2)} == {"s1"}
    assert followup.prior_receipts(db, s1) == []  # an ordinary screen: alone


@pytest.mark.parametrize(("value", "message"), [
    ("2", "use LOOK:SCREEN_ID"),
    ("1:s1", "use LOOK:SCREEN_ID"),
    ("2:s 1", "use LOOK:SCREEN_ID"),
    ("4:s1", "allows at most 3"),
], ids=["no-id", "look-1", "bad-id", "beyond-design"])
def test_runner_follow_up_value(value: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_follow_up(value, scope(protocol=SEQ))
    assert parse_follow_up("3:camp.5s.x.20261202T101500Z", scope(protocol=SEQ)) == (
        3, "camp.5s.x.20261202T101500Z")
    assert parse_follow_up(None, scope()) is None
    with pytest.raises(UsageError, match="declares no"):
        parse_follow_up("2:s1", scope())
    with pytest.raises(UsageError, match="control-vs-control"):
        parse_follow_up("2:s1", scope(protocol=SEQ), control_only=True)


def test_a_confirmation_or_a_later_screen_is_not_continued(db: Session) -> None:
    add(db, finished("SUPPORTED", confirmation="provisional"))
    s2 = add(db, {**finished("INCONCLUSIVE", "s2"), "plan": {"purpose": "confirm"}})
    with pytest.raises(followup.FollowUpRefused, match="confirmation screen: one fixed"):
        followup.plan_followup(db, s2, scope(protocol=SEQ), BLOB)
    s3 = add(db, finished("INCONCLUSIVE", "s3"))
    with pytest.raises(followup.FollowUpRefused, match="began with S1: a later screen"):
        followup.plan_followup(db, s3, scope(protocol=SEQ), BLOB)
