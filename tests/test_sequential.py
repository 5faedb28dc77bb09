"""Group-sequential looks (evidence.sequential) and how verdicts use them: the Lan-DeMets
spending functions against scipy's normal distribution, the exact boundaries' total level,
the series read from follow-up receipts, and the projection of a follow-up."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta
from typing import Any

import pytest
from _evidence_factory import receipt, scope, screen
from scipy import stats as sps

from evidence import stats
from evidence.models import Receipt, SequentialDesign
from evidence.sequential import (
    conditional_power,
    information,
    plan_looks,
    project_followup,
    spent,
)
from evidence.verdicts import Evidence, judge

SEQ = {"sequential": {"looks": 3, "max_sessions_per_arm": 9, "spending": "obrien-fleming"}}


@pytest.mark.parametrize("t", [0.1, 1 / 3, 0.5, 2 / 3, 0.9, 1.0])
def test_obrien_fleming_spending_matches_the_formula(t: float) -> None:
    z = sps.norm.ppf(1 - 0.05 / 2)
    assert spent(t, 0.05, "obrien-fleming") == pytest.approx(
        2 - 2 * sps.norm.cdf(z / math.sqrt(t)), rel=1e-9)


def test_spending_functions_are_monotone_and_end_at_alpha() -> None:
    for fn in ("obrien-fleming", "pocock"):
        vals = [spent(i / 20, 0.05, fn) for i in range(21)]
        assert vals[0] == 0 and vals[-1] == pytest.approx(0.05)
        assert all(a <= b for a, b in itertools.pairwise(vals))
    # O'Brien-Fleming spends far less than Pocock early
    assert spent(1 / 3, 0.05, "obrien-fleming") < 0.001 < spent(1 / 3, 0.05, "pocock")
    with pytest.raises(ValueError, match="unknown spending"):
        spent(0.5, 0.05, "haybittle")


@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
@pytest.mark.parametrize("first", [2, 3, 4, 5])
@pytest.mark.parametrize("step", [1, 2, 3])
def test_total_exact_level_of_all_looks_never_exceeds_alpha(spending: str, first: int,
                                                            step: int) -> None:
    """Bonferroni: the sum of the looks' exact null probabilities bounds the false SUPPORTED
    rate over the series; the construction keeps it at or below alpha, at every look."""
    d = SequentialDesign(looks=3, max_sessions_per_arm=first + 2 * step, spending=spending)
    sizes = [(first + k * step, first + k * step) for k in range(3)]
    looks = plan_looks(d, sizes)
    assert looks[-1].final and looks[-1].cumulative == 0.05
    total = sum(lk.attained for lk in looks)
    assert total == pytest.approx(looks[-1].spent_after) and total <= 0.05 + 1e-12
    for lk in looks:
        if lk.u is not None:
            assert stats.null_cdf(lk.m, lk.n, lk.u) <= lk.level + 1e-12


def test_look_one_at_three_sessions_cannot_decide_under_obrien_fleming() -> None:
    looks = plan_looks(SequentialDesign(), [(3, 3), (6, 6)])
    assert looks[0].u is None and looks[0].level < 0.001
    assert looks[1].u == 4 and looks[1].level == pytest.approx(spent(2 / 3, 0.05,
                                                                     "obrien-fleming"))


@pytest.mark.parametrize(("sizes", "match"), [
    ([(3, 3), (2, 2)], "cannot shrink"),
    ([(3, 3), (9, 9), (10, 10)], "the design's last"),
    ([(3, 3), (4, 4), (5, 5), (6, 6)], "at most 3"),
    ([(0, 3)], "each arm"),
], ids=["shrinks", "after-final", "too-many", "empty-arm"])
def test_bad_series_is_refused(sizes: list[tuple[int, int]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_looks(SequentialDesign(), sizes)


def test_information_is_the_harmonic_mean() -> None:
    assert information(4, 4) == 4 and information(3, 6) == 4 and information(0, 5) == 0


def test_conditional_power_follows_the_effect() -> None:
    far = conditional_power([100, 101, 99], [60, 61, 59.5], 0.7, 3, 4)
    edge = conditional_power([100, 101, 99], [70, 70.5, 69.5], 0.7, 3, 4)
    assert far > 0.99 and edge < 0.5
    assert conditional_power([100.0], [60.0], 0.7, 3, None) == 0.0
    # deterministic: the same evidence projects the same figure
    assert far == conditional_power([100, 101, 99], [60, 61, 59.5], 0.7, 3, 4)


def test_projection_picks_the_fewest_sessions_reaching_80_percent() -> None:
    p = project_followup(SequentialDesign(), [(3, 3)], [100, 103, 97], [66, 62, 64], 0.7)
    assert p is not None and p.look == 2 and p.probability >= 0.8
    if p.sessions_per_arm > 1:
        fewer = plan_looks(SequentialDesign(), [(3, 3), (3 + p.sessions_per_arm - 1,) * 2])
        assert conditional_power([100, 103, 97], [66, 62, 64], 0.7, p.sessions_per_arm - 1,
                                 fewer[-1].u) < 0.8
    # the design's last look is taken: nothing further to project
    assert project_followup(SequentialDesign(), [(3, 3), (6, 6), (9, 9)], [1.0], [1.0],
                            0.7) is None


# --------------------------------------------------------------------- verdicts


def follow_up(control: list[float], candidate: list[float], sid: str, look: int,
              hours: float, first: str = "s1") -> list[Receipt]:
    """A follow-up screen ``sid`` (look ``look`` of ``first``), ``hours`` after the first."""
    return [r.model_copy(update={
        "started_at": r.started_at + timedelta(hours=hours), "look": look,
        "continues": first}) for r in screen(control, candidate, screen=sid)]


def verdict(rs: list[Receipt], **protocol: Any) -> Any:
    ev = Evidence.from_lists(scope(protocol=protocol), rs)
    return next(v for v in judge(ev) if v.candidate == "rank-local"
                and v.track == "5s-lossless")


CTRL = [100.0, 101.0, 102.0]
FAST = [60.0, 60.5, 61.0]


def test_first_look_is_underpowered_and_projects_a_follow_up() -> None:
    """Declared before the first look, the design gives look 1 (3 vs 3) only its
    O'Brien-Fleming share: INCONCLUSIVE, with a priced follow-up."""
    rs = [r.model_copy(update={"stopped_at": r.started_at + timedelta(minutes=30),
                               "devices": ["0", "1", "2", "3"]}) for r in screen(CTRL, FAST)]
    v = verdict(rs, **SEQ)
    assert v.verdict == "INCONCLUSIVE" and "UNDERPOWERED" in v.codes
    assert [lk.look for lk in v.looks] == [1] and v.alpha_spent == 0
    f = v.followup
    assert f is not None and f.continues == "s1" and f.look == 2 and f.probability >= 0.8
    # 2 k sessions of 30 minutes on 4 devices
    assert f.device_hours == pytest.approx(2 * f.sessions_per_arm * 0.5 * 4)
    # the fixed design decides the same sessions at once
    assert verdict(rs).verdict == "SUPPORTED" and verdict(rs).followup is None


def test_follow_up_look_decides_with_its_alpha_share() -> None:
    rs = screen(CTRL, FAST) + follow_up([100.5, 99.5, 101.5], [60.2, 61.5, 59.8], "s2", 2, 12)
    v = verdict(rs, **SEQ)
    assert v.verdict == "SUPPORTED" and v.series == ["s1", "s2"]
    assert [(lk.look, lk.m, lk.n) for lk in v.looks] == [(1, 3, 3), (2, 6, 6)]
    assert v.alpha_level == pytest.approx(spent(2 / 3, 0.05, "obrien-fleming"))
    assert v.alpha_spent == pytest.approx(stats.null_cdf(6, 6, 4))
    assert "SEQUENTIAL_LOOK" in v.codes and v.confirmation == "provisional"
    # a later plain screen confirms the series
    later = [r.model_copy(update={"started_at": r.started_at + timedelta(hours=48),
                                  "session_id": r.session_id.replace("s1", "s3", 1)})
             for r in screen(CTRL, FAST, screen="s3")]
    assert verdict(rs + later, **SEQ).confirmation == "confirmed"


@pytest.mark.parametrize(("case", "code"), [
    ("undeclared", "FOLLOWUP_UNDECLARED"),
    ("wrong-look", "SERIES_BROKEN"),
    ("overlapping", "SERIES_BROKEN"),
    ("orphan", "SERIES_BROKEN"),
], ids=["undeclared", "wrong-look", "overlapping", "orphan"])
def test_broken_series_is_invalid(case: str, code: str) -> None:
    proto: dict[str, Any] = {} if case == "undeclared" else SEQ
    if case == "orphan":
        rs = follow_up(CTRL, FAST, "s2", 2, 12, first="s9")
    else:
        rs = screen(CTRL, FAST) + follow_up(
            CTRL, FAST, "s2", 3 if case == "wrong-look" else 2,
            1 if case == "overlapping" else 12)
    v = verdict(rs, **proto)
    assert v.verdict == "INCONCLUSIVE" and code in v.codes


def test_receipt_needs_look_and_continues_together() -> None:
    with pytest.raises(ValueError, match="go together"):
        receipt("control", 0, 100.0, look=2)


def test_auto_followup_needs_a_declared_design() -> None:
    with pytest.raises(ValueError, match="auto_followup needs"):
        scope(protocol={"auto_followup": True})
    assert scope(protocol={"auto_followup": True, **SEQ}).protocol.auto_followup
