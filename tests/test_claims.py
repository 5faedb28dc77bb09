"""Claims in prose trace to receipts or verdicts at the stated precision (issue 3)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from _evidence_factory import scope, screen

from evidence.claims import check_claims, extract_claims
from evidence.verdicts import Evidence, judge

SEED_003 = ("Current state: PR #294 merged with historical five-second evidence: "
            "407.27 → 108.12 s HTTP end-to-end latency (73.45% lower) on eight 910B1 NPUs.")
SEED_000 = ("The rank-local 24-resident-layer screen was early rejected after its first "
            "measured pair: 173.211 s control versus 365.884 s candidate (2.11x).")


def _ev(control: list[float], candidate: list[float]) -> Evidence:
    order = "AB" * max(len(control), len(candidate))
    return Evidence.from_lists(scope(), screen(control, candidate, order=order[:len(
        control) + len(candidate)]))


EV_003 = lambda: _ev([407.27], [108.12])  # noqa: E731
EV_000 = lambda: _ev([173.211], [365.884])  # noqa: E731
EV_NONE = lambda: Evidence.from_lists(scope(), [])  # noqa: E731

CASES = [
    # id, prose, evidence, expected rules (in order of appearance)
    ("seed-003-traces-with-receipts", SEED_003, EV_003, []),
    ("seed-003-flagged-without-receipts", SEED_003, EV_NONE,
     ["UNTRACEABLE_CLAIM"] * 3),
    ("issue-text-ascii-arrow", "407.27 -> 108.12 s (73.45 % lower)", EV_003, []),
    ("issue-text-ascii-arrow-no-receipts", "407.27 -> 108.12 s (73.45 % lower)", EV_NONE,
     ["UNTRACEABLE_CLAIM"] * 3),
    ("seed-000-ratio-from-same-line", SEED_000, EV_000, []),
    ("seed-000-without-receipts", SEED_000, EV_NONE, ["UNTRACEABLE_CLAIM"] * 3),
    ("coarser-precision-traces", "control took 407.3 s", EV_003, []),
    ("wrong-at-stated-precision", "control took 407.2 s", EV_003, ["UNTRACEABLE_CLAIM"]),
    ("milliseconds", "candidate: 108120 ms", EV_003, []),
    ("scope-target-and-duration", "target: 30% lower at 5 s and 15 s", EV_NONE, []),
    ("percent-of-unlinked-latencies", "it was 50.00% faster", EV_003, ["UNTRACEABLE_CLAIM"]),
    ("verdict-pairwise-percent", "the screen measured 73.45% lower latency", EV_003, []),
    ("summed-gains", "rank-local gives 12.5% and resident 9.0%: together 21.5% lower",
     EV_NONE, ["UNTRACEABLE_CLAIM", "UNTRACEABLE_CLAIM", "SUMMED_GAINS"]),
    ("compounded-gains", "A alone 20.0% lower, B alone 10.0% lower.\n\nStacked: 28.0% lower.",
     EV_NONE, ["UNTRACEABLE_CLAIM", "UNTRACEABLE_CLAIM", "SUMMED_GAINS"]),
    ("code-and-comments-skipped", "```\n999.99 s\n```\n<!-- 12.5% -->\n`3.5x`", EV_NONE, []),
]


@pytest.mark.parametrize(("text", "ev", "rules"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_claims(text: str, ev, rules: list[str]) -> None:  # noqa: ANN001
    e = ev()
    claims, findings = check_claims("pr-body.md", text, e, judge(e))
    assert [f.rule for f in findings] == rules, [(c.text, c.traced_to) for c in claims]
    for f in findings:
        assert f.path == "pr-body.md" and f.line is not None and f.resolution
        assert f.severity == ("P0" if f.rule == "SUMMED_GAINS" else "P1")


def test_claim_lines_and_traces() -> None:
    e = EV_003()
    text = "intro\n\n" + SEED_003
    claims, findings = check_claims("body.md", text, e, judge(e))
    assert not findings
    assert [c.line for c in claims] == [3, 3, 3]
    assert "s1-5s-lossless-0" in (claims[0].traced_to or "")
    assert "108.12 s" in (claims[2].traced_to or "") or "verdict" in (claims[2].traced_to or "")


def test_extract_units_and_precision() -> None:
    cs = extract_claims("1,702.939 s median; 2.11× slower; 4x910B1; TP2xSP2; 1344x768; exit137")
    assert [(c.value, c.unit, c.decimals) for c in cs] == [(1702.939, "s", 3), (2.11, "x", 2)]


# Real campaign prose: the user guide's opening (the README's until it was rewritten) and the
# example campaign's title state the 30 % target as a target; a result verb makes the same
# number a claim to question.
GUIDE_TARGET = ("A *campaign* is a performance target pursued on a hardware pool, such as "
                "campaign #320: at least 30 % lower end-to-end latency for MiniMax-H3 Ref2VA on "
                "four Ascend 910B1 NPUs, at 5 s and 15 s of output, lossless and lossy, with no "
                "quality loss.")
EXAMPLE_ROOT = Path(__file__).resolve().parents[1] / "examples" / "h3-ref2va-4x910b1"


def _example() -> tuple[Evidence, list]:
    from evidence.bundle import load_campaign
    ev = Evidence.from_loaded(load_campaign(EXAMPLE_ROOT))
    return ev, judge(ev)


def test_guide_and_example_prose_trace_targets_as_targets() -> None:
    ev, verdicts = _example()
    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    assert GUIDE_TARGET in " ".join(guide.split())
    title = tomllib.loads((EXAMPLE_ROOT / "campaign.toml").read_text())["title"]
    for text in (GUIDE_TARGET, title, "target: 30% lower at 5 s and 15 s",
                 "no screen reached the 30 % target yet",
                 "beyond the 1.10x futility margin"):
        claims, findings = check_claims("body.md", text, ev, verdicts)
        assert not findings, (text, [(c.text, c.traced_to) for c in claims])
        assert any("target reduction" in (c.traced_to or "")
                   or "futility" in (c.traced_to or "") for c in claims)


@pytest.mark.parametrize("text", [
    "tp2-sp2 cuts latency by 30%, a 1.1x speedup",
    "The TP2xSP2 screen reached 30% lower latency.",
    "task-queue-l2 gives 30 % lower latency at 5 s",
    "The speedup is 1.10x.",
])
def test_setting_stated_as_result_is_a_finding(text: str) -> None:
    ev, verdicts = _example()
    claims, findings = check_claims("body.md", text, ev, verdicts)
    settings = [c for c in claims if c.kind != "latency"]
    assert settings and all(c.setting_as_result and not c.traced_to for c in settings)
    assert [f.rule for f in findings] == ["CLAIM_CITES_TARGET_AS_RESULT"] * len(settings)
    assert all(f.severity == "P1" and f.line == 1 and f.resolution for f in findings)
    assert "setting of the scope" in findings[0].message


def test_framing_is_per_number_and_evidence_wins_over_a_setting() -> None:
    ev, verdicts = _example()
    text = "tp2-sp2 cuts latency by 30%, meeting the 30% target.\nFirst pair: 2.11x."
    claims, findings = check_claims("body.md", text, ev, verdicts)
    assert [(c.line, bool(c.traced_to), bool(c.setting_as_result)) for c in claims] == [
        (1, False, True), (1, True, False), (2, True, False)]
    assert [(f.rule, f.line) for f in findings] == [("CLAIM_CITES_TARGET_AS_RESULT", 1)]
    # a verdict ratio equal to the futility margin traces to the verdict, framed or not
    e = _ev([100.0, 100.0, 100.0], [110.0, 110.0, 110.0])
    claims, findings = check_claims("b.md", "the candidate is 1.10x slower", e, judge(e))
    assert not findings and "verdict" in (claims[0].traced_to or "")
