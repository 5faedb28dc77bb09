"""Per-track verdicts: the exact decision rule, every gate, hostile receipts (issue 3)."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from datetime import timedelta
from typing import Any

import pytest
from _evidence_factory import (
    CTRL_CFG,
    lifecycle,
    lossless_report,
    lossy_report,
    receipt,
    scope,
    screen,
    sha,
)
from pydantic import ValidationError
from scipy.stats import mannwhitneyu

from evidence import stats
from evidence.models import Receipt, RequestRecord
from evidence.verdicts import (
    PRIOR_NOISE_LABEL,
    CompositionRefused,
    Evidence,
    ReceiptIn,
    compose_verdicts,
    decide,
    judge,
    judge_lists,
    prior_noise_decision,
    session_median,
)

THETA0 = 0.7  # target reduction 0.30


def _welch_allows(control: list[float], candidate: list[float], theta0: float) -> bool:
    """The spread guard, computed independently: True unless the candidate's log medians
    spread more than 1.5x control's and scipy's one-sided Welch p exceeds 0.05."""
    from scipy.stats import ttest_ind

    x = [math.log(t) - math.log(theta0) for t in candidate]
    y = [math.log(c) for c in control]
    if statistics.stdev(x) <= 1.5 * statistics.stdev(y):
        return True
    return float(ttest_ind(x, y, equal_var=False, alternative="less").pvalue) <= 0.05


def _exact_p(control: list[float], candidate: list[float], theta0: float) -> float:
    """scipy's exact one-sided p for 'candidate/control < theta0' (log scale shift)."""
    x = [math.log(t) - math.log(theta0) for t in candidate]
    y = [math.log(c) for c in control]
    return float(mannwhitneyu(x, y, alternative="less", method="exact").pvalue)


# ------------------------------------------------------------------------ the decision

DECISIONS = [
    # id, control medians, candidate medians, verdict, codes, u
    ("1v1", [100.0], [50.0], "INCONCLUSIVE", ["UNDERPOWERED"], None),
    ("2v2", [100.0, 101.0], [50.0, 51.0], "INCONCLUSIVE", ["UNDERPOWERED"], None),
    ("3v2", [100.0, 101.0, 102.0], [50.0, 51.0], "INCONCLUSIVE", ["UNDERPOWERED"], None),
    ("3v3-separated", [100.0, 101.0, 102.0], [69.0, 69.5, 69.9], "SUPPORTED", ["TARGET_MET"], 0),
    # separated, but the candidate's sessions spread 8x control's and Welch's p is 0.08
    ("3v3-separated-noisier", [100.0, 101.0, 102.0], [60.0, 61.0, 69.9], "INCONCLUSIVE",
     ["UNEQUAL_SPREAD"], 0),
    ("3v3-overlapping", [100.0, 101.0, 102.0], [60.0, 61.0, 71.0], "INCONCLUSIVE",
     ["OVERLAP"], 0),
    ("3v3-tie-at-theta0", [100.0, 101.0, 102.0], [60.0, 61.0, 70.0], "INCONCLUSIVE",
     ["OVERLAP"], 0),
    ("4v4-one-contrary", [100.0, 101.0, 102.0, 103.0], [60.0, 61.0, 62.0, 70.5], "SUPPORTED",
     ["TARGET_MET"], 1),
    ("4v4-two-contrary", [100.0, 101.0, 102.0, 103.0], [60.0, 61.0, 62.0, 71.0],
     "INCONCLUSIVE", ["OVERLAP"], 1),
    ("3v3-missed-not-slower", [100.0, 101.0, 102.0], [90.0, 91.0, 92.0], "FAILED",
     ["TARGET_MISSED"], 0),
    ("3v3-regression", [100.0, 101.0, 102.0], [130.0, 131.0, 140.0], "FAILED",
     ["TARGET_MISSED", "REGRESSION"], 0),
    ("3v3-equal-sessions", [100.0, 100.0, 100.0], [100.0, 100.0, 100.0], "FAILED",
     ["TARGET_MISSED"], 0),
    ("5v5-mixed", [100.0, 104.0, 98.0, 101.0, 103.0], [68.0, 72.0, 69.0, 65.0, 80.0],
     "INCONCLUSIVE", ["OVERLAP"], 4),
]


@pytest.mark.parametrize(("control", "candidate", "verdict", "codes", "u"),
                         [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS])
def test_decision(control: list[float], candidate: list[float], verdict: str,
                  codes: list[str], u: int | None) -> None:
    d = decide(control, candidate, THETA0)
    assert d.verdict == verdict
    assert [r.code for r in d.reasons] == codes
    assert d.u == u
    m, n = len(control), len(candidate)
    assert d.pairs == m * n
    assert d.spread == pytest.approx(max(control) / min(control))
    assert d.best_confidence == pytest.approx(1 - 1 / math.comb(m + n, m))
    if u is None:
        assert d.lower is d.upper is None
        assert d.more_pairs_needed is not None and d.more_pairs_needed >= 1
    else:
        ratios = sorted(t / c for c in control for t in candidate)
        assert (d.lower, d.upper) == (ratios[u], ratios[-1 - u])
        assert d.confidence == pytest.approx(1 - stats.null_cdf(m, n, u))
        assert d.confidence >= 0.95
    assert d.regression == ("REGRESSION" in codes)


def test_3v3_reads_max_t_below_theta0_min_c() -> None:
    """For 3 vs 3, SUPPORTED iff max(t) < theta0 * min(c) (and the spread guard allows)."""
    rng = random.Random(3)
    for _ in range(300):
        c = [rng.uniform(90, 110) for _ in range(3)]
        t = [rng.uniform(55, 85) for _ in range(3)]
        assert (decide(c, t, THETA0).verdict == "SUPPORTED") == (
            max(t) < THETA0 * min(c) and _welch_allows(c, t, THETA0))


@pytest.mark.parametrize(("m", "n"), [(3, 3), (4, 4), (3, 4), (5, 3), (5, 5), (6, 4), (8, 8)],
                         ids=lambda v: str(v))
def test_supported_iff_scipy_exact_p_at_most_alpha(m: int, n: int) -> None:
    """Tie-free random designs: SUPPORTED exactly when scipy's exact one-sided
    Mann-Whitney p on t/theta0 against c is <= 0.05."""
    rng = random.Random(m * 100 + n)
    for _ in range(60):
        c = [rng.uniform(90, 110) for _ in range(m)]
        t = [rng.uniform(58, 82) for _ in range(n)]
        supported = decide(c, t, THETA0).verdict == "SUPPORTED"
        assert supported == (_exact_p(c, t, THETA0) <= 0.05 + 1e-12
                             and _welch_allows(c, t, THETA0))


def test_4v4_one_contrary_pair_against_scipy() -> None:
    c, t = [100.0, 101.0, 102.0, 103.0], [60.0, 61.0, 62.0, 70.5]
    d = decide(c, t, THETA0)
    assert d.above == 1 and d.verdict == "SUPPORTED"
    p = _exact_p(c, t, THETA0)
    assert p == pytest.approx(2 / 70)  # P(U <= 1) at 4 vs 4
    assert d.confidence == pytest.approx(1 - 2 / 70)


@pytest.mark.parametrize(("m", "n", "u"), [(1, 1, None), (2, 2, None), (3, 2, None),
                                           (3, 3, 0), (4, 4, 1), (5, 5, 4), (6, 6, 7),
                                           (10, 10, 27)], ids=lambda v: str(v))
def test_exact_u_from_scipy(m: int, n: int, u: int | None) -> None:
    assert stats.exact_u(m, n) == u
    if u is not None:  # u is the last count with P(U <= u) <= alpha
        assert stats.null_cdf(m, n, u) <= 0.05 + 1e-12 < stats.null_cdf(m, n, u + 1)


@pytest.mark.parametrize(("m", "n", "best"), [(1, 1, 0.5), (2, 2, 5 / 6), (3, 2, 0.9)],
                         ids=["1v1", "2v2", "3v2"])
def test_underpowered_best_confidence(m: int, n: int, best: float) -> None:
    d = decide([100.0 + i for i in range(m)], [50.0 + i for i in range(n)], THETA0)
    assert d.best_confidence == pytest.approx(best)
    assert f"{best:.1%}" in d.reasons[0].text


def test_hodges_lehmann_is_median_of_pairwise_ratios() -> None:
    c, t = [100.0, 110.0], [50.0, 66.0]
    ratios = sorted([0.5, 50 / 110, 0.66, 0.6])
    assert decide(c, t, THETA0).ratio == pytest.approx(math.sqrt(ratios[1] * ratios[2]))


def test_decide_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="finite and positive"):
        decide([100.0, float("nan")], [50.0], THETA0)
    with pytest.raises(ValueError, match="at least one session"):
        decide([], [50.0], THETA0)


# ------------------------------------------------------------------------- the gates

FAST = ([100.0, 101.0, 102.0], [60.0, 61.0, 62.0])


def _v(rs: list[Receipt], reports: tuple = (), sc: Any = None, **kw: Any):
    vs = judge_lists(sc or scope(), rs, list(reports), **kw)
    return [v for v in vs if v.candidate is not None or not any(x.candidate for x in vs)]


def _one(rs: list[Receipt], reports: tuple = (), sc: Any = None, **kw: Any):
    vs = [v for v in _v(rs, reports, sc, **kw) if v.reasons[0].code != "NO_SESSIONS"]
    assert len(vs) == 1, [(v.track, v.candidate) for v in vs]
    return vs[0]


def _bad_request(rs: list[Receipt]) -> list[Receipt]:
    r = rs[1]
    reqs = [q.model_copy(update={"http_status": 500}) if q.kind == "measured" else q
            for q in r.requests]
    return [rs[0], r.model_copy(update={"requests": reqs}), *rs[2:]]


def _with(rs: list[Receipt], i: int, **update: Any) -> list[Receipt]:
    data = rs[i].model_dump(by_alias=True)
    data.update(update)
    return [*rs[:i], Receipt.model_validate(data), *rs[i + 1:]]


GATE_CASES: list[tuple[str, Any, str, str]] = [
    ("clean-ABBAAB", lambda: screen(*FAST, order="ABBAAB"), "SUPPORTED", "TARGET_MET"),
    ("validity-request-500", lambda: _bad_request(screen(*FAST)), "INCONCLUSIVE",
     "REQUEST_FAILED"),
    ("validity-worker-killed", lambda: _with(screen(*FAST), 0, lifecycle=lifecycle(
        kill_actions=4, terminate_actions=4)), "INCONCLUSIVE", "LIFECYCLE_FAILED"),
    ("validity-container-exit-1", lambda: _with(screen(*FAST), 1, lifecycle=lifecycle(
        container_exit_code=1)), "INCONCLUSIVE", "LIFECYCLE_FAILED"),
    ("validity-devices-busy", lambda: _with(screen(*FAST), 1, lifecycle=lifecycle(
        devices_idle_after={"idle": False})), "INCONCLUSIVE", "LIFECYCLE_FAILED"),
    ("validity-control-revision", lambda: _with(screen(*FAST), 0, engine_revision="0be853d4"),
     "INCONCLUSIVE", "REVISION_MISMATCH"),
    ("validity-control-config", lambda: _with(screen(*FAST), 0, config_digest=sha("x")),
     "INCONCLUSIVE", "CONFIG_MISMATCH"),
    ("validity-candidate-is-control", lambda: screen(*FAST, cand_kw={"config_digest": CTRL_CFG}),
     "INCONCLUSIVE", "CANDIDATE_IS_CONTROL"),
    ("validity-unknown-candidate", lambda: screen(*FAST, cand_kw={"candidate": "mystery"}),
     "INCONCLUSIVE", "CANDIDATE_UNKNOWN"),
    ("validity-inputs-differ", lambda: _with(screen(*FAST), 1, input_digests={
        "prompt": sha("other prompt")}), "INCONCLUSIVE", "INPUTS_DIFFER"),
    ("validity-pool", lambda: _with(screen(*FAST), 2, pool="8x910b1"), "INCONCLUSIVE",
     "POOL_MISMATCH"),
    ("validity-campaign", lambda: _with(screen(*FAST), 2, campaign="other"), "INCONCLUSIVE",
     "CAMPAIGN_MISMATCH"),
    ("validity-arm-vs-order", lambda: _with(screen(*FAST, order="ABBAAB"), 0, order="BABAAB"),
     "INCONCLUSIVE", "ORDER_MISMATCH"),
    ("design-2-per-arm", lambda: screen([100.0, 101.0], [60.0, 61.0]), "INCONCLUSIVE",
     "TOO_FEW_SESSIONS"),
    ("design-unbalanced-AAABBB", lambda: screen(*FAST, order="AAABBB"), "INCONCLUSIVE",
     "UNBALANCED_ORDER"),
    ("design-no-warmup", lambda: screen(*FAST, warmups=0), "INCONCLUSIVE", "WARMUP_MISSING"),
    ("design-regression-still-gated", lambda: screen([100.0, 101.0], [200.0, 201.0]),
     "INCONCLUSIVE", "TOO_FEW_SESSIONS"),
    ("decision-regression", lambda: screen([100.0, 101.0, 102.0], [130.0, 131.0, 140.0]),
     "FAILED", "TARGET_MISSED"),
]


@pytest.mark.parametrize(("build", "verdict", "code"), [c[1:] for c in GATE_CASES],
                         ids=[c[0] for c in GATE_CASES])
def test_gates(build: Any, verdict: str, code: str) -> None:
    v = _one(build())
    assert v.verdict == verdict, v.reasons
    assert code in v.codes
    assert v.codes[0] == code or verdict in ("SUPPORTED", "FAILED")
    if verdict == "INCONCLUSIVE":  # a gated verdict never lists the decision's outcome
        assert not {"TARGET_MET", "TARGET_MISSED", "REGRESSION", "OVERLAP"} & set(v.codes)


def test_regression_flag_and_report_fields() -> None:
    v = _one(screen([100.0, 101.0, 102.0], [130.0, 131.0, 140.0]))
    assert v.regression and "REGRESSION" in v.codes
    assert (v.m, v.n, v.pairs, v.u) == (3, 3, 9, 0)
    assert v.lower == pytest.approx(130 / 102) and v.upper == pytest.approx(140 / 100)
    assert v.control_spread == pytest.approx(1.02)
    assert v.confidence == pytest.approx(0.95)


def test_quality_failure_with_regression_keeps_the_flag() -> None:
    rs = screen([100.0, 101.0, 102.0], [130.0, 131.0, 140.0], cand_outputs=CAND,
                ctrl_outputs=CTRL_SAME)
    v = _one(rs, (lossless_report("ctrl", "cand-1", False),))
    assert v.verdict == "FAILED" and v.regression
    assert v.codes[0] == "LOSSLESS_MISMATCH" and "REGRESSION" in v.codes


def test_gate_order_validity_beats_quality_failure() -> None:
    """A failed request makes it INCONCLUSIVE even when quality failed too."""
    rs = _bad_request(screen(*FAST, cand_outputs=["c1", "c2", "c3"]))
    reps = (lossless_report("out-5s-lossless", n, False) for n in ("c1", "c2", "c3"))
    v = _one(rs, tuple(reps))
    assert v.verdict == "INCONCLUSIVE" and v.codes[0] == "REQUEST_FAILED"
    assert "LOSSLESS_MISMATCH" in v.codes


def test_unverified_manifest_entry_disqualifies() -> None:
    rs = screen(*FAST)
    items = [ReceiptIn(r, f"receipts/{r.session_id}.json") for r in rs]
    ev = Evidence(scope(), items, unverified={"receipts/s1-5s-lossless-0.json"})
    v = [x for x in judge(ev) if x.candidate][0]
    assert v.verdict == "INCONCLUSIVE" and v.codes[0] == "MANIFEST_UNVERIFIED"


def test_referenced_media_report_missing() -> None:
    rs = screen(*FAST, cand_kw={"media_reports": ["reports/nope.json"]})
    ev = Evidence(scope(), [ReceiptIn(r, f"receipts/{r.session_id}.json") for r in rs])
    v = [x for x in judge(ev) if x.candidate][0]
    assert v.verdict == "INCONCLUSIVE" and "MEDIA_REPORT_MISSING" in v.codes


# ------------------------------------------------------------------------- quality

CTRL_SAME = ["ctrl", "ctrl", "ctrl"]
CTRL_DIFF = ["ctrl-a", "ctrl-b", "ctrl-c"]
CAND = ["cand-1", "cand-2", "cand-3"]

QUALITY_CASES: list[tuple[str, dict, tuple, str, str]] = [
    ("lossless-byte-identical", {}, (), "SUPPORTED", "TARGET_MET"),
    ("lossless-bit-exact-by-report",
     {"ctrl_outputs": CTRL_SAME, "cand_outputs": CAND},
     tuple(lossless_report("ctrl", c, True) for c in CAND), "SUPPORTED", "TARGET_MET"),
    ("lossless-mismatch-fails-whatever-speed",
     {"ctrl_outputs": CTRL_SAME, "cand_outputs": CAND},
     (lossless_report("ctrl", "cand-1", False),), "FAILED", "LOSSLESS_MISMATCH"),
    ("lossless-pcm-mismatch",
     {"ctrl_outputs": CTRL_SAME, "cand_outputs": CAND},
     (lossless_report("ctrl", "cand-1", True, pcm=False),), "FAILED", "LOSSLESS_MISMATCH"),
    ("lossless-control-not-repeatable-even-if-perceptual-pass",
     {"ctrl_outputs": CTRL_DIFF, "cand_outputs": CAND},
     (lossless_report("ctrl-a", "ctrl-b", False), lossy_report("ctrl-a", "cand-1")),
     "INCONCLUSIVE", "LOSSLESS_CONTROL_NOT_REPEATABLE"),
    ("lossless-pcm-not-compared",
     {"ctrl_outputs": CTRL_SAME, "cand_outputs": CAND},
     tuple(lossless_report("ctrl", c, True, pcm=None) for c in CAND), "INCONCLUSIVE",
     "LOSSLESS_UNPROVEN"),
    ("lossless-no-evidence",
     {"ctrl_outputs": CTRL_SAME, "cand_outputs": CAND}, (), "INCONCLUSIVE",
     "LOSSLESS_UNPROVEN"),
    ("lossless-differs-but-repeatability-unknown",
     {"ctrl_outputs": CTRL_DIFF, "cand_outputs": CAND},
     (lossless_report("ctrl-a", "cand-1", False),), "INCONCLUSIVE", "LOSSLESS_UNPROVEN"),
]


@pytest.mark.parametrize(("kw", "reports", "verdict", "code"), [c[1:] for c in QUALITY_CASES],
                         ids=[c[0] for c in QUALITY_CASES])
def test_lossless_quality(kw: dict, reports: tuple, verdict: str, code: str) -> None:
    v = _one(screen(*FAST, **kw), reports)
    assert v.verdict == verdict, v.reasons
    assert code in v.codes


LOSSY = {"track": "15s-lossy", "ctrl_outputs": CTRL_SAME, "cand_outputs": CAND}

LOSSY_CASES: list[tuple[str, dict, str, str]] = [
    ("lossy-all-gates-pass", {}, "SUPPORTED", "TARGET_MET"),
    ("lossy-lpips-fails", {"lpips": 0.3}, "FAILED", "QUALITY_GATE_FAILED"),
    ("lossy-ssim-below-scope-gate", {"ssim_all": 0.96}, "FAILED", "QUALITY_GATE_FAILED"),
    ("lossy-rms-out-of-range", {"audio_rms_ratio": 2.5}, "FAILED", "QUALITY_GATE_FAILED"),
    ("lossy-psnr-identical-inf", {"psnr_avg_db": math.inf}, "SUPPORTED", "TARGET_MET"),
    ("lossy-metric-nan", {"lpips": math.nan}, "INCONCLUSIVE", "QUALITY_UNPROVEN"),
    ("lossy-metric-missing", {"audio_spectral_cosine": None}, "INCONCLUSIVE",
     "QUALITY_UNPROVEN"),
    ("lossy-structural-fails", {"structural_ok": False}, "FAILED", "STRUCTURAL_FAILED"),
]


@pytest.mark.parametrize(("values", "verdict", "code"), [c[1:] for c in LOSSY_CASES],
                         ids=[c[0] for c in LOSSY_CASES])
def test_lossy_quality(values: dict, verdict: str, code: str) -> None:
    reports = tuple(lossy_report("ctrl", c, **values) for c in CAND)
    v = _one(screen(*FAST, **LOSSY), reports)
    assert v.verdict == verdict, v.reasons
    assert code in v.codes


def test_lossy_identical_output_needs_no_perceptual_report() -> None:
    v = _one(screen(*FAST, track="15s-lossy"))  # candidate MP4 byte-identical to control's
    assert v.verdict == "SUPPORTED"
    kw = {**LOSSY}
    v = _one(screen(*FAST, **kw), tuple(lossless_report("ctrl", c, True) for c in CAND))
    assert v.verdict == "SUPPORTED"


def test_lossy_without_report_is_unproven() -> None:
    v = _one(screen(*FAST, **LOSSY), (lossy_report("ctrl", "cand-1"),))
    assert v.verdict == "INCONCLUSIVE" and "QUALITY_UNPROVEN" in v.codes


# ----------------------------------------------------------------------- hostile input


def _raw(**update: Any) -> dict[str, Any]:
    data = json.loads(receipt("control", 0, 100.0).model_dump_json(by_alias=True))
    data.update(update)
    return data


@pytest.mark.parametrize(("data", "field"), [
    (lambda: {k: v for k, v in _raw().items() if k != "lifecycle"}, "lifecycle"),
    (lambda: {k: v for k, v in _raw().items() if k != "track"}, "track"),
    (lambda: _raw(requests=[{"index": 0, "kind": "measured", "http_status": 200,
                             "client_wall_s": float("nan")}]), "client_wall_s"),
    (lambda: _raw(requests=[{"index": 0, "kind": "measured", "client_wall_s": -1}]),
     "client_wall_s"),
    (lambda: _raw(arm="treatment"), "arm"),
    (lambda: _raw(schema="campaign-bot/receipt@9"), "schema"),
], ids=["missing-lifecycle", "missing-track", "nan-wall", "negative-wall", "bad-arm",
        "unknown-schema"])
def test_hostile_receipt_refused_with_field(data: Any, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        Receipt.model_validate(data())
    assert field in str(e.value)


def test_nan_smuggled_past_validation_is_not_a_median() -> None:
    rs = screen(*FAST)
    bad = rs[1].model_copy(update={"requests": [
        rs[1].requests[0],
        RequestRecord.model_construct(index=1, kind="measured", http_status=200,
                                      client_wall_s=float("nan"), error=None,
                                      stage_durations={}),
    ]})
    assert session_median(bad) is None
    v = _one([rs[0], bad, *rs[2:]])
    assert v.verdict == "INCONCLUSIVE" and v.codes[0] == "REQUEST_FAILED"
    assert v.n == 2


def test_mixed_tracks_in_one_screen() -> None:
    rs = screen(*FAST)
    rs = _with(rs, 2, track="15s-lossy")
    vs = [v for v in judge_lists(scope(), rs) if v.candidate]
    assert {v.track for v in vs} == {"5s-lossless", "15s-lossy"}
    assert all(v.verdict == "INCONCLUSIVE" and "TRACK_MIXED" in v.codes for v in vs)


def test_unknown_track_and_mixed_candidates() -> None:
    rs = screen(*FAST, track="60s-lossless")
    v = _one(rs)
    assert v.verdict == "INCONCLUSIVE" and "TRACK_UNKNOWN" in v.codes
    rs = _with(screen(*FAST), 2, candidate="resident-24")
    vs = [v for v in judge_lists(scope(), rs) if v.candidate]
    assert {v.candidate for v in vs} == {"rank-local", "resident-24"}
    assert all("CANDIDATE_MIXED" in v.codes for v in vs)


def test_tracks_without_receipts_and_control_only() -> None:
    vs = judge_lists(scope(), [receipt("control", 0, 814.064)])
    by = {v.track: v for v in vs}
    assert "NO_CANDIDATE" in by["5s-lossless"].codes
    assert by["5s-lossless"].candidate is None and by["5s-lossless"].m == 1
    assert by["15s-lossy"].codes == ["NO_SESSIONS"]


# ---------------------------------------------------------------- medians, tail, modes


def test_session_median_excludes_warmups() -> None:
    r = receipt("control", 0, [100.0, 300.0, 101.0], warmups=2)
    assert session_median(r) == 101.0


@pytest.mark.parametrize(("per_session", "status"), [(19, "underpowered"), (20, "ok")],
                         ids=["57-requests", "60-requests"])
def test_tail_needs_59_measured_requests(per_session: int, status: str) -> None:
    rng = random.Random(per_session)
    walls = [[rng.uniform(90, 110) for _ in range(per_session)] for _ in range(3)]
    cand = [[w * 0.6 for w in ws] for ws in walls]
    rs = []
    for slot, ch in enumerate("ABBAAB"):
        arm = "control" if ch == "A" else "candidate"
        src = walls if ch == "A" else cand
        rs.append(receipt(arm, slot, src[sum(1 for c in "ABBAAB"[:slot] if c == ch)]))
    v = _one(rs, sc=scope(protocol={"measured_requests_per_session": per_session}))
    tails = {t.arm: t for t in v.tail}
    assert tails["control"].status == status and tails["candidate"].status == status
    if status == "ok":
        vals = sorted(x for ws in walls for x in ws)
        assert tails["control"].p95_s == vals[math.ceil(0.95 * 60) - 1]
        assert tails["control"].p95_upper_bound_s == vals[stats.p95_upper_bound_index(60)]
    else:
        assert tails["control"].p95_s is None
    assert v.m == 3  # the verdict still counts sessions, not requests


def test_p95_bound_index_threshold() -> None:
    assert stats.p95_upper_bound_index(58) is None
    assert stats.p95_upper_bound_index(59) == 58


def _history(k: int) -> list[Receipt]:
    rng = random.Random(k)
    return [receipt("control", i, rng.uniform(99, 101), screen="aa", candidate=None,
                    order=None) for i in range(k)]


def test_prior_noise_mode_is_labelled_and_needs_ten_diffs() -> None:
    rs = screen([100.0], [60.0], order="AB") + _history(11)
    sc = scope(protocol={"min_measured_sessions_per_arm": 1})
    v = _one(rs, sc=sc, prior_noise=True)
    assert v.verdict == "INCONCLUSIVE" and "UNDERPOWERED" in v.codes  # exact rule rules
    assert v.prior_noise is not None and v.prior_noise.label == PRIOR_NOISE_LABEL
    assert v.prior_noise.diffs == 10 and v.prior_noise.decision == "SUPPORTED"
    v = _one(screen([100.0], [60.0], order="AB") + _history(10), sc=sc, prior_noise=True)
    assert v.prior_noise is None  # 9 differences are not enough
    assert _one(rs, sc=sc).prior_noise is None  # off unless asked


def test_prior_noise_decision_math() -> None:
    diffs = [0.01, -0.01] * 5
    res = prior_noise_decision([100.0], [69.0], THETA0, diffs)
    se = math.sqrt(0.0001 / 2 * 2)
    assert res.ratio == pytest.approx(0.69)
    assert res.upper == pytest.approx(math.exp(math.log(0.69) + 1.8124611 * se), rel=1e-6)
    with pytest.raises(ValueError, match="at least 10"):
        prior_noise_decision([100.0], [69.0], THETA0, diffs[:9])


def test_composition_refused() -> None:
    a = _one(screen(*FAST))
    with pytest.raises(CompositionRefused, match="direct"):
        compose_verdicts(a, a)


def test_several_screens_pool_sessions_per_candidate() -> None:
    rs = screen([100.0, 101.0], [60.0, 61.0], order="ABBA", screen="s1") + screen(
        [102.0, 103.0], [62.0, 63.0], order="ABBA", screen="s2")
    v = _one(rs)
    assert (v.m, v.n, v.screens) == (4, 4, ["s1", "s2"])
    assert v.verdict == "SUPPORTED"


def test_every_verdict_has_reasons_with_text() -> None:
    designs = itertools.product([1, 2, 3], [1, 2, 3])
    for m, n in designs:
        v = _one(screen([100.0 + i for i in range(m)], [60.0 + i for i in range(n)]))
        assert v.reasons and all(r.text for r in v.reasons)
        assert v.summary


def test_large_designs_use_labelled_normal_approximation() -> None:
    rng = random.Random(7)
    c = [rng.uniform(90, 110) for _ in range(101)]
    t = [rng.uniform(55, 65) for _ in range(101)]
    assert stats.u_method(100, 100) == "exact" and stats.u_method(101, 101) == "asymptotic"
    d = decide(c, t, THETA0)
    assert d.verdict == "SUPPORTED" and "normal approximation" in d.reasons[0].text


# ------------------------------------------------ unequal noise and campaign-level control


def test_noisier_candidate_failed_direction_needs_welch_too() -> None:
    """FAILED by ranks, but the candidate spreads far more than control and Welch's test in
    the 'slower' direction does not agree: INCONCLUSIVE, never FAILED on ranks alone."""
    d = decide([100.0, 101.0, 102.0], [72.0, 90.0, 120.0], THETA0)
    assert d.verdict == "INCONCLUSIVE" and [r.code for r in d.reasons] == ["UNEQUAL_SPREAD"]
    assert "ranks: " in d.reasons[0].text and "TARGET" not in d.reasons[0].code


def _later(rs: list[Receipt], hours: float, screen_id: str) -> list[Receipt]:
    return [r.model_copy(update={
        "started_at": r.started_at + timedelta(hours=hours), "screen_id": screen_id,
        "session_id": r.session_id.replace("s1", screen_id, 1)}) for r in rs]


FAST = ([100.0, 101.0, 102.0], [60.0, 60.5, 61.0])
SLOW = ([100.0, 101.0, 102.0], [69.0, 69.5, 71.0])  # alone: one contrary pair, no u


@pytest.mark.parametrize(("second", "state"), [
    (None, "provisional"), (FAST, "confirmed"), (SLOW, "not confirmed")],
    ids=["no-confirmation-yet", "confirmed", "confirmation-fails"])
def test_supported_is_provisional_until_a_confirmation_screen(second: Any, state: str) -> None:
    rs = screen(*FAST, order="ABBAAB")
    if second is not None:
        rs += _later(screen(*second, order="ABBAAB"), 24, "s2")
    ev = Evidence.from_lists(scope(), rs)
    v = next(v for v in judge(ev) if v.candidate == "rank-local" and v.track == "5s-lossless")
    assert v.verdict == "SUPPORTED" and v.confirmation == state
    assert v.shown == f"SUPPORTED ({state})" and v.confirmation_text
    if state == "confirmed":
        assert "confirmation screen s2" in v.confirmation_text


def test_a_screen_that_overlaps_the_first_does_not_confirm_it() -> None:
    """The confirmation must start after the first screen ended: two interleaved screens are
    one experiment, not a replication."""
    rs = screen(*FAST, order="ABBAAB") + _later(screen(*FAST, order="ABBAAB"), 2, "s2")
    v = next(v for v in judge(Evidence.from_lists(scope(), rs)) if v.candidate == "rank-local"
             and v.track == "5s-lossless")
    assert v.verdict == "SUPPORTED" and v.confirmation == "provisional"


# --------------------------------------------------------------- no-regression tracks

NO_REGRESSION = {"id": "15s-shutdown", "duration_s": 15, "expected_frames": 362,
                 "quality_mode": "lossless", "kind": "no-regression", "max_slowdown": 0.05}


@pytest.mark.parametrize(("candidate", "verdict"), [
    ([100.5, 101.0, 101.5], "EQUIVALENT"),   # upper bound 1.015 < 1.05
    ([104.0, 106.0, 107.0], "NOT SHOWN"),    # pairs above 1.05: not shown within 5 %
    ([130.0, 131.0, 132.0], "NOT SHOWN"),    # a clear regression
], ids=["within-margin", "not-shown", "regression"])
def test_no_regression_track_is_a_non_inferiority_verdict(candidate: list[float],
                                                          verdict: str) -> None:
    sc = scope(tracks=[NO_REGRESSION])
    rs = screen([100.0, 101.0, 102.0], candidate, order="ABBAAB", track="15s-shutdown")
    v = next(v for v in judge(Evidence.from_lists(sc, rs)) if v.candidate == "rank-local")
    assert v.verdict == verdict and v.theta0 == pytest.approx(1.05)
    assert v.confirmation is None and v.shown == verdict
    if verdict == "EQUIVALENT":
        assert v.upper is not None and v.upper < 1.05
    assert sc.tracks[0].target_text == "<= +5 %"


@pytest.mark.parametrize(("track", "error"), [
    ({k: v for k, v in NO_REGRESSION.items() if k != "max_slowdown"}, "needs max_slowdown"),
    ({**NO_REGRESSION, "target_reduction": 0.30}, "states max_slowdown, not target_reduction"),
    ({**NO_REGRESSION, "kind": "speedup", "target_reduction": 0.3}, "max_slowdown is for"),
    ({**NO_REGRESSION, "kind": "speedup", "max_slowdown": None, "target_reduction": -0.1},
     "target_reduction must be above 0"),
], ids=["no-margin", "both", "margin-on-speedup", "negative-target"])
def test_track_kind_fields_are_checked(track: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        scope(tracks=[track])


def test_screen_check_run_conclusion_of_a_no_regression_verdict() -> None:
    from bot.features.screen.results import check_conclusion

    assert check_conclusion("success", "EQUIVALENT") == "success"
    assert check_conclusion("success", "NOT SHOWN") == "neutral"
    assert check_conclusion("success", "SUPPORTED") == "success"
