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
    ("faster-but-short-of-target", lambda: _pair(100.0, 90.0), {}, "CONTINUE", "next pair"),
    ("slower-within-margin", lambda: _pair(100.0, 109.0), {}, "CONTINUE", "next pair"),
    ("slower-beyond-margin", lambda: _pair(100.0, 111.0), {}, "REJECT", "futility"),
    ("scope-margin-1.5", lambda: _pair(100.0, 120.0), {"futility_ratio": 1.5}, "CONTINUE",
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
