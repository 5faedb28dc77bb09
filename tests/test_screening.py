"""Screening decisions (never verdicts): futility margin from the scope, failures reject."""

from __future__ import annotations

from typing import Any

import pytest
from _evidence_factory import lifecycle, lossless_report, receipt, scope, screen

from evidence.models import Receipt
from evidence.screening import SCREENING_LABEL, screen_decisions
from evidence.verdicts import Evidence


def _failed_request(r: Receipt) -> Receipt:
    reqs = [q.model_copy(update={"http_status": 500, "client_wall_s": None})
            if q.kind == "measured" else q for q in r.requests]
    return r.model_copy(update={"requests": reqs})


def _with(r: Receipt, **update: Any) -> Receipt:
    data = r.model_dump(by_alias=True)
    data.update(update)
    return Receipt.model_validate(data)


def _pair(c: float, t: float, **kw: Any) -> list[Receipt]:
    return screen([c], [t], order="AB", **kw)


CASES: list[tuple[str, Any, dict, str, str]] = [
    ("seed-000-resident-layers-2.11x", lambda: _pair(173.211, 365.884), {}, "REJECT",
     "futility margin"),
    ("clearly-faster", lambda: _pair(100.0, 60.0), {}, "PROMOTE_TO_FULL_SCREEN", "target"),
    ("short-of-target-within-margin", lambda: _pair(100.0, 75.0), {}, "CONTINUE",
     "more balanced pair(s) could decide"),
    # 10 % lower against a 30 % target: 0.90 / 1.10 = 0.82 > 0.70, the target is out of reach
    ("faster-but-target-excluded", lambda: _pair(100.0, 90.0), {}, "REJECT",
     "futility on the target"),
    ("slower-within-margin", lambda: _pair(100.0, 109.0), {}, "REJECT",
     "futility on the target"),
    ("slower-beyond-margin", lambda: _pair(100.0, 111.0), {}, "REJECT", "futility margin"),
    ("scope-margin-1.5", lambda: _pair(100.0, 104.0), {"futility_ratio": 1.5}, "CONTINUE",
     "1.5"),
    ("candidate-request-failed", lambda: [
        receipt("control", 0, 100.0, order="AB"),
        _failed_request(receipt("candidate", 1, 60.0, order="AB"))], {}, "REJECT",
     "request failed"),
    ("candidate-container-exit-1", lambda: [
        receipt("control", 0, 166.572, order="AB"),
        receipt("candidate", 1, 60.0, order="AB", lifecycle=lifecycle(container_exit_code=1))],
     {}, "REJECT", "lifecycle"),
    ("candidate-idle-check-not-recorded", lambda: [
        receipt("control", 0, 100.0, order="AB"),
        receipt("candidate", 1, 60.0, order="AB", lifecycle=lifecycle(
            devices_idle_before=None))], {}, "PROMOTE_TO_FULL_SCREEN", "target"),
    ("control-killed", lambda: [
        receipt("control", 0, 100.0, order="AB", lifecycle=lifecycle(kill_actions=4)),
        receipt("candidate", 1, 60.0, order="AB")], {}, "CONTINUE", "fix control"),
    ("no-control-yet", lambda: [receipt("candidate", 1, 60.0, order="AB")], {}, "CONTINUE",
     "no complete"),
    ("ABBA-later-pairs-beyond-margin", lambda: screen([100.0, 100.0], [105.0, 140.0],
                                                      order="ABBA"),
     {}, "REJECT", "ratio"),
]


@pytest.mark.parametrize(("build", "protocol", "decision", "why"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_screening(build: Any, protocol: dict, decision: str, why: str) -> None:
    ds = screen_decisions(Evidence.from_lists(scope(protocol=protocol), build()))
    assert len(ds) == 1
    d = ds[0]
    assert d.decision == decision, d.reason
    assert why in d.reason
    assert d.label == SCREENING_LABEL
    assert d.decision not in ("SUPPORTED", "FAILED", "INCONCLUSIVE")


def test_seed_000_first_pair_ratio() -> None:
    d = screen_decisions(Evidence.from_lists(scope(), _pair(173.211, 365.884)))[0]
    assert d.first_pair_ratio == pytest.approx(365.884 / 173.211)
    assert d.first_pair == ("s1-5s-lossless-0", "s1-5s-lossless-1")


def test_quality_failure_rejects() -> None:
    rs = screen([100.0], [60.0], order="AB", cand_outputs=["cand"])
    rs += [receipt("control", 5, 101.0, screen="aa", candidate=None, order=None)]
    d = screen_decisions(Evidence.from_lists(scope(), rs, [
        lossless_report("out-5s-lossless", "cand", False)]))
    d = [x for x in d if x.screen_id == "s1"][0]
    assert d.decision == "REJECT" and "quality" in d.reason


def test_control_only_screen_has_no_decision() -> None:
    assert screen_decisions(Evidence.from_lists(scope(), [receipt("control", 0, 100.0)])) == []


def _track_target(target: float, **protocol: Any) -> Any:
    from _evidence_factory import SCOPE_DATA

    tracks = [{**t, "target_reduction": target} for t in SCOPE_DATA["tracks"]]
    return scope(tracks=tracks, protocol=protocol)


def test_campaign_297_small_gain_against_50_percent_target_is_rejected() -> None:
    """Campaign #297: one clean 5 s pair, 1.57 % lower complete-HTTP latency, 50 % target."""
    d = screen_decisions(Evidence.from_lists(_track_target(0.50), _pair(292.148, 287.561)))[0]
    assert d.decision == "REJECT", d.reason
    assert "futility on the target" in d.reason and "1.6 % lower" in d.reason
    assert d.more_pairs_needed is None


def test_continue_says_how_many_pairs_could_decide() -> None:
    d = screen_decisions(Evidence.from_lists(scope(), _pair(100.0, 75.0)))[0]
    assert d.decision == "CONTINUE" and d.more_pairs_needed is not None
    assert f"{d.more_pairs_needed} more balanced pair(s) could decide" in d.reason
    # one pair 0.75 against theta0 0.7: no pair is contrary toward FAILED, 3 v 3 is the
    # smallest design with a tolerance (u = 0): two more pairs
    assert d.more_pairs_needed == 2


def test_exact_rule_failed_rejects_on_target() -> None:
    # four pairs, every ratio about 0.8 against theta0 0.5; the best pair 0.76 / 1.5 = 0.507
    # would pass the margin test, the exact rule already says FAILED
    rs = screen([100.0, 101.0, 99.0, 100.5], [80.0, 79.0, 81.0, 80.5], order="ABBAABBA")
    d = screen_decisions(Evidence.from_lists(_track_target(0.5, futility_ratio=1.6), rs))[0]
    assert d.decision == "REJECT" and "exact rule already excludes" in d.reason, d.reason


def test_a_full_balanced_screen_is_not_promoted_to_one() -> None:
    """Three qualified sessions per arm (the protocol's minimum), all clearly faster: the
    screen already is a full one, so no PROMOTE_TO_FULL_SCREEN is shown (it was); its verdict
    says the rest.  One pair of the same is still promoted."""
    full = screen([100.0, 101.0, 99.0], [60.0, 61.0, 59.0], order="ABBAAB")
    assert screen_decisions(Evidence.from_lists(scope(), full)) == []
    (d,) = screen_decisions(Evidence.from_lists(scope(), _pair(100.0, 60.0)))
    assert d.decision == "PROMOTE_TO_FULL_SCREEN"
