"""Screening decisions: ``PROMOTE_TO_FULL_SCREEN`` / ``REJECT`` / ``CONTINUE``.

A screening decision is NOT a verdict and is never shown as one.  Campaigns stop clearly bad
candidates after one pair to save device hours (campaign #320: the resident-layer screen, 173.211 s
control against 365.884 s candidate, was rejected after its first measured pair).

Rules, per (track, candidate, screen), in order:

1. REJECT when any candidate request failed (non-200, error, no timing), a candidate
   lifecycle failed (a worker, server or container exit, a forced action, busy devices; a
   device idle check that was merely not recorded does not reject), or a candidate output
   fails a quality gate (FAILED by :func:`evidence.verdicts.judge_quality`): campaign #297,
   "Stop candidate promotion on quality failure, resource interference, request failure or
   incomplete cleanup".
2. CONTINUE when control is not usable (failed control request or lifecycle, as in 1): fix
   control first; nothing is concluded about the candidate.
3. With the first balanced pair (the first control and the first candidate session, in slot
   order): REJECT when ``t / c > protocol.futility_ratio`` (the scope's futility margin, for
   example 1.10).  Later pairs make it REJECT when the Hodges-Lehmann ratio of every session
   so far exceeds the margin.
4. PROMOTE_TO_FULL_SCREEN when the Hodges-Lehmann ratio of the sessions so far is at or below
   ``theta0 = 1 - target_reduction`` (the pair is consistent with the target) and quality is
   not failed; no decision at all when the screen already is a full one (each arm has
   ``protocol.min_measured_sessions_per_arm`` qualified sessions): its verdict says the rest.
5. REJECT (futility on the target) when the sessions already exclude reaching the target:
   the exact rule of :func:`evidence.verdicts.decide` already says FAILED, or even the most
   favourable pairwise ratio, granted the scope's futility margin as the most one pair may
   mislead (``min(t_j / c_i) / futility_ratio``), is above ``theta0``.  Campaign #297's
   screening pair is the case: 1.57 % lower latency against a 50 % target (theta0 0.5;
   0.984 / 1.10 = 0.895) can never become the target's gain.
6. CONTINUE otherwise (no complete pair yet, or a ratio that may still reach the target),
   with ``more_pairs_needed``: how many further balanced pairs could let the exact rule
   decide if the observed fraction of contrary pairs held (:func:`evidence.stats.
   pairs_needed`, as the verdict's projection; None: not within 40 pairs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evidence import stats
from evidence.models import MediaReport, Receipt, Track
from evidence.verdicts import (
    Evidence,
    decide,
    hard_lifecycle_issues,
    judge_quality,
    request_issues,
    session_median,
)

ScreenValue = Literal["PROMOTE_TO_FULL_SCREEN", "REJECT", "CONTINUE"]
SCREENING_LABEL = "screening decision (not a verdict)"


class ScreeningDecision(BaseModel):
    """A screening decision for one candidate on one track in one screen.

    ``first_pair_ratio`` is candidate/control of the first balanced pair (dimensionless);
    ``ratio`` the Hodges-Lehmann ratio over all sessions so far.
    """

    model_config = ConfigDict(defer_build=True)

    label: str = SCREENING_LABEL
    track: str
    candidate: str
    screen_id: str
    decision: ScreenValue
    reason: str
    futility_ratio: float
    theta0: float | None = None
    first_pair: tuple[str, str] | None = Field(
        default=None, description="(control session id, candidate session id)."
    )
    first_pair_ratio: float | None = None
    ratio: float | None = None
    more_pairs_needed: int | None = Field(
        default=None, description="CONTINUE: further balanced pairs that could let the exact "
        "rule decide if the observed contrary fraction held; None when not projected.")
    m: int = 0
    n: int = 0


def screen_decisions(ev: Evidence) -> list[ScreeningDecision]:
    """One :class:`ScreeningDecision` per (screen, track, candidate) with candidate sessions,
    except a full screen that would be promoted (rule 4: nothing to promote)."""
    scope = ev.scope
    tracks = {t.id: t for t in scope.tracks}
    reports = [r.report for r in ev.reports]
    by_key: dict[tuple[str, str], list[Receipt]] = defaultdict(list)
    for it in ev.receipts:
        by_key[(it.receipt.screen_id, it.receipt.track)].append(it.receipt)
    out: list[ScreeningDecision] = []
    fut = scope.protocol.futility_ratio
    for (sid, tr), rs in sorted(by_key.items()):
        cands = sorted({r.candidate for r in rs if r.arm == "candidate" and r.candidate})
        track = tracks.get(tr)
        theta0 = 1 - track.target_reduction if track else None
        for cand in cands:
            ctrl = sorted((r for r in rs if r.arm == "control"), key=lambda r: r.slot)
            mine = sorted((r for r in rs if r.arm == "candidate" and r.candidate == cand),
                          key=lambda r: r.slot)
            d = _decide(sid, tr, cand, ctrl, mine, theta0, fut, track, ev, reports)
            if d is not None:
                out.append(d)
    return out


def _decide(sid: str, tr: str, cand: str, ctrl: list[Receipt], mine: list[Receipt],
            theta0: float | None, fut: float, track: Track | None, ev: Evidence,
            reports: list[MediaReport]) -> ScreeningDecision | None:
    base: dict[str, Any] = {"track": tr, "candidate": cand, "screen_id": sid, "futility_ratio": fut,
            "theta0": theta0, "m": len(ctrl), "n": len(mine)}
    failed = [f"{r.session_id}: {t}" for r in mine for _, t in request_issues(r)]
    if failed:
        return ScreeningDecision(decision="REJECT", reason=f"candidate request failed: "
                                 f"{failed[0]}", **base)
    dirty = [f"{r.session_id}: {'; '.join(t for _, t in hard)}" for r in mine
             if (hard := hard_lifecycle_issues(r.lifecycle))]
    if dirty:
        return ScreeningDecision(decision="REJECT", reason=f"candidate lifecycle not clean: "
                                 f"{dirty[0]}", **base)
    if track is not None:
        pool = [i.receipt for i in ev.receipts if i.receipt.arm == "control"
                and i.receipt.track == tr
                and i.receipt.config_digest in {r.config_digest for r in ctrl}]
        q = judge_quality(track, ev.scope, mine, pool, reports)
        if q.failed:
            return ScreeningDecision(decision="REJECT",
                                     reason=f"quality gate failed: {q.failed[0].text}", **base)
    bad_ctrl = [r.session_id for r in ctrl
                if request_issues(r) or hard_lifecycle_issues(r.lifecycle)]
    if bad_ctrl:
        return ScreeningDecision(decision="CONTINUE", reason=f"control session(s) "
                                 f"{', '.join(bad_ctrl)} not usable: fix control first", **base)
    c_med = [(r, m) for r in ctrl if (m := session_median(r))]
    t_med = [(r, m) for r in mine if (m := session_median(r))]
    if not c_med or not t_med:
        return ScreeningDecision(decision="CONTINUE", reason="no complete control/candidate "
                                 "pair yet", **base)
    (c0, cm), (t0, tm) = c_med[0], t_med[0]
    first = tm / cm
    ratio = stats.hodges_lehmann(stats.pairwise_ratios([m for _, m in c_med],
                                                       [m for _, m in t_med]))
    base |= {"first_pair": (c0.session_id, t0.session_id), "first_pair_ratio": first,
             "ratio": ratio}
    if first > fut:
        return ScreeningDecision(
            decision="REJECT", reason=f"first pair: candidate {tm:.3f} s is {first:.2f}x "
            f"control {cm:.3f} s, beyond the futility margin {fut:g}x", **base)
    if len(c_med) + len(t_med) > 2 and ratio > fut:
        return ScreeningDecision(
            decision="REJECT", reason=f"ratio {ratio:.3f} over {len(c_med)} vs {len(t_med)} "
            f"sessions is beyond the futility margin {fut:g}x", **base)
    if theta0 is not None and ratio <= theta0:
        full = ev.scope.protocol.min_measured_sessions_per_arm
        if len(c_med) >= full and len(t_med) >= full:
            return None  # already a full balanced screen: nothing to promote; its verdict says
        return ScreeningDecision(
            decision="PROMOTE_TO_FULL_SCREEN", reason=f"ratio {ratio:.3f} at or below the "
            f"target's {theta0:g}: worth a full balanced screen", **base)
    if theta0 is None:
        return ScreeningDecision(
            decision="CONTINUE", reason=f"ratio {ratio:.3f}: the track is not in the scope, "
            "so no target to screen against: run the next pair", **base)
    c_vals, t_vals = [m for _, m in c_med], [m for _, m in t_med]
    dec = decide(c_vals, t_vals, theta0)
    best = min(stats.pairwise_ratios(c_vals, t_vals))
    gain = (1 - ratio) * 100
    target = (1 - theta0) * 100
    if dec.verdict == "FAILED":
        return ScreeningDecision(
            decision="REJECT", reason=f"futility on the target: the exact rule already "
            f"excludes {target:g} % lower latency ({dec.below} of {dec.pairs} pairs at or "
            f"below {theta0:g}); ratio {ratio:.3f}", **base)
    if best / fut > theta0:
        return ScreeningDecision(
            decision="REJECT", reason=f"futility on the target: {gain:.1f} % lower latency "
            f"(ratio {ratio:.3f}) cannot reach the {target:g} % target: even the best pair "
            f"{best:.3f}, granted the futility margin {fut:g}x, stays above {theta0:g}",
            **base)
    more = dec.more_pairs_needed
    base["more_pairs_needed"] = more
    nxt = (f"{more} more balanced pair(s) could decide" if more is not None
           else "no decision is projected within 40 more pairs")
    return ScreeningDecision(
        decision="CONTINUE", reason=f"ratio {ratio:.3f} between the target {theta0:g} and the "
        f"futility margin {fut:g}: run the next pair ({nxt})", **base)


def decisions_for(ev: Evidence, candidate: str, track: str) -> Sequence[ScreeningDecision]:
    """The screening decisions of one candidate on one track."""
    return [d for d in screen_decisions(ev) if d.candidate == candidate and d.track == track]
