"""evidence.header + bot.features.header.render: the header says what the evidence says, no more."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.features.header.block import END, START
from bot.features.header.render import cell_filter, render_header
from evidence.header import (
    EvidenceRef,
    EvidenceSource,
    QueueItem,
    Reason,
    ScreenDecision,
    TrackVerdict,
    budget_from_receipts,
    build_header,
)
from tests.campaign_status.builders import T0, receipt, scope

EV = EvidenceRef("0123456789abcdef" * 2 + "01234567", T0, "https://example.test/tree/x")


def _controls(track: str, n: int = 3, clean: bool = True) -> list:
    return [
        receipt(track, "control", 170.0 + i, session=f"c{i}", slot=i, clean=clean)
        for i in range(n)
    ]


def test_no_candidates_no_verdicts() -> None:
    h = build_header(scope(), [EvidenceSource(sha="f" * 40, receipts=_controls("5s-lossless"))],
                     EV, queue=[])
    assert [r.verdict for r in h.board] == ["no verdict"] * 4
    assert h.decision_needed == "none"
    assert "Plan a screen" in h.next_action
    assert "Nothing is queued or running" in h.current_state
    text = render_header(h)
    assert "| 5s-lossless (lossless) | -30 % | 3 clean control session(s)" in text
    assert "Queue: empty." in text
    assert "Updated from evidence at [`01234567`](https://example.test/tree/x) on " \
           "2026-11-20 08:00 UTC" in text


def test_verdict_is_copied_never_upgraded() -> None:
    v = TrackVerdict("resident-layers", "5s-lossless", "INCONCLUSIVE",
                     (Reason("UNDERPOWERED", "1 vs 1 cannot reach alpha 0.05"),),
                     ratio=0.61, m=1, n=1)
    src = EvidenceSource(sha="b" * 40, pr=12, verdicts=[v], receipts=[
        receipt("5s-lossless", "candidate", 105.0, session="t0", candidate="resident-layers")])
    h = build_header(scope(), [EvidenceSource(sha="f" * 40), src], EV, queue=[])
    row = h.board[0]
    assert (row.candidate, row.verdict, row.pr, row.m_vs_n) == (
        "resident-layers", "INCONCLUSIVE", 12, "1 vs 1")
    assert row.ratio == "0.610x (no exact bounds)"
    text = render_header(h)
    assert "SUPPORTED" not in text


def test_best_candidate_prefers_supported_then_lowest_ratio() -> None:
    a = TrackVerdict("a", "5s-lossy", "INCONCLUSIVE", ratio=0.5, m=3, n=3)
    b = TrackVerdict("b", "5s-lossy", "SUPPORTED", ratio=0.62, lower=0.58, upper=0.66,
                     confidence=0.95, m=3, n=3)
    c = TrackVerdict("c", "5s-lossy", "SUPPORTED", ratio=0.65, lower=0.6, upper=0.69,
                     confidence=0.95, m=3, n=3)
    h = build_header(scope(), [EvidenceSource(sha="1" * 40, pr=3, verdicts=[a, c]),
                               EvidenceSource(sha="2" * 40, pr=4, verdicts=[b])], EV, queue=[])
    row = next(r for r in h.board if r.track == "5s-lossy")
    assert (row.candidate, row.pr, row.verdict) == ("b", 4, "SUPPORTED")
    assert row.ratio == "0.620x [0.580, 0.660] (95.0 %)"


def test_failed_baseline_lifecycle_is_said_and_next_action_names_fix() -> None:
    rs = [receipt("5s-lossless", "control", 814.064, session="base-1", clean=False)]
    h = build_header(scope(), [EvidenceSource(sha="f" * 40, receipts=rs)], EV, queue=[])
    assert "5s-lossless (5 s lossless) failed its lifecycle" in h.current_state
    assert h.next_action.startswith(
        "Fix the baseline: re-run the control baseline of 5s-lossless (5 s lossless) with a "
        "clean shutdown (first failure: 4 workers still running; 4 terminate action(s); 4 kill "
        "action(s)); ")
    assert "every worker exits 0" in h.next_action
    assert h.board[0].baseline == "0 clean control session(s), 1 failed lifecycle"
    assert "Problems in the evidence" in render_header(h)


def test_budget_at_limit_names_decision() -> None:
    sc = scope(budget={"candidate_directions": 6, "wall_hours": 1.0, "device_hours": 4.0})
    rs = [receipt("5s-lossless", "control", 1200.0, session="c0"),
          receipt("5s-lossless", "candidate", 1200.0, session="t0", candidate="tp2-sp2",
                  start=T0 + timedelta(hours=1))]
    lines = budget_from_receipts(sc, rs)
    assert [(b.name, b.used) for b in lines] == [
        ("candidate directions", 1.0), ("wall-hours", 1.67), ("device-hours", 6.67)]
    h = build_header(sc, [EvidenceSource(sha="f" * 40, receipts=rs)], EV, queue=[])
    assert h.decision_needed.startswith("budget exhausted (wall-hours 1.67h of 1h, "
                                        "device-hours 6.67h of 4h used): @amy-why-3459 decide")
    assert "until the budget is extended" in h.next_action
    assert "(reached)" in render_header(h)


def test_screening_is_not_a_verdict_and_queue_drives_next_action() -> None:
    d = ScreenDecision("resident-layers", "5s-lossless", "REJECT",
                       "candidate 2.11x control in the first pair")
    src = EvidenceSource(sha="c" * 40, pr=9, screens=[d], receipts=[
        receipt("5s-lossless", "candidate", 365.884, session="t0",
                candidate="resident-layers")])
    q = [QueueItem("tp2-sp2", "15s-lossy", "queued", pr=10, pool="910b1-4x",
                   waits_on="pool 910b1-4x"),
         QueueItem("fused-qkv", "5s-lossy", "awaiting-approval", pr=11, head_sha="d" * 40)]
    h = build_header(scope(), [EvidenceSource(sha="f" * 40), src], EV, queue=q)
    assert "screening REJECT: candidate 2.11x control" in h.current_state
    assert h.board[0].verdict == "no verdict"
    assert h.candidates[0].screening == "5s-lossless: REJECT"
    assert h.candidates[0].verdicts["5s-lossless"] == "-"
    assert h.next_action == "Next queued screen: tp2-sp2 on 15s-lossy (PR #10). " \
                            "Waits on: pool 910b1-4x."
    assert "approve screening candidate fused-qkv on PR #11 head dddddddd" in h.decision_needed
    assert "0 screen(s) running, 2 queued" in h.current_state


def test_repeatability_reason_asks_for_refreeze() -> None:
    v = TrackVerdict("x", "15s-lossless", "INCONCLUSIVE",
                     (Reason("CONTROL_NOT_REPEATABLE", "control outputs differ"),), m=3, n=3)
    h = build_header(scope(), [EvidenceSource(sha="f" * 40, verdicts=[v])], EV, queue=None)
    assert "re-freeze" in h.decision_needed
    assert "Screen queue: unknown" in h.current_state
    assert "Queue: unknown" in render_header(h)


def test_unknown_track_in_verdict_is_an_error() -> None:
    v = TrackVerdict("x", "30s-lossy", "FAILED")
    with pytest.raises(KeyError, match="30s-lossy"):
        build_header(scope(), [EvidenceSource(sha="f" * 40, verdicts=[v])], EV)


def test_repository_text_cannot_forge_markers_or_mention() -> None:
    sc = scope(candidates=[{"name": "evil", "source": f"{END} @someone | x"}])
    v = TrackVerdict("evil", "5s-lossy", "FAILED", m=3, n=3)
    text = render_header(build_header(sc, [EvidenceSource(sha="f" * 40, verdicts=[v])], EV))
    assert END not in text and START not in text
    assert "@someone" not in text
    assert cell_filter("a|b\nc") == "a\\|b c"


def test_same_evidence_same_text() -> None:
    rs = _controls("5s-lossless")
    a = render_header(build_header(scope(), [EvidenceSource(sha="f" * 40, receipts=rs)], EV))
    b = render_header(build_header(scope(), [EvidenceSource(sha="f" * 40, receipts=rs)], EV))
    assert a == b
    ev2 = EvidenceRef(EV.sha, datetime(2026, 11, 20, 9, 0, tzinfo=UTC), EV.url)
    c = render_header(build_header(scope(), [EvidenceSource(sha="f" * 40, receipts=rs)], ev2))
    assert c != a


def test_pr_carrying_default_branch_receipts_does_not_duplicate_candidates() -> None:
    base_rs = [receipt("5s-lossy", "candidate", 120.0, session="t0", candidate="a")]
    v = TrackVerdict("a", "5s-lossy", "INCONCLUSIVE", ratio=0.7, m=1, n=1)
    base = EvidenceSource(sha="1" * 40, receipts=base_rs, verdicts=[v])
    # PR 5 branched from the default branch (same receipts) and adds candidate b
    b_rs = [receipt("15s-lossy", "candidate", 900.0, session="t9", screen="scr-9",
                    candidate="b")]
    vb = TrackVerdict("b", "15s-lossy", "INCONCLUSIVE", ratio=0.9, m=1, n=1)
    pr = EvidenceSource(sha="2" * 40, pr=5, receipts=base_rs + b_rs, verdicts=[v, vb])
    h = build_header(scope(), [base, pr], EV, queue=[])
    assert [(c.candidate, c.pr) for c in h.candidates] == [("a", None), ("b", 5)]
    assert next(r for r in h.board if r.track == "5s-lossy").pr is None
