"""The result of one screen as the comment shows it: sessions in run order, per-arm medians,
the ratio with its exact bounds, the verdict with reasons, quality gates, lifecycle, device
time charged and a Mermaid ``xychart-beta`` of each session's latency.

:func:`build_result` turns the verified bundle's receipts and media reports, plus the
decision computed by ``evidence`` (verdict, ratio, bounds, reasons), into a plain view model
that ``templates/screen_result.md.j2`` renders.  Nothing here decides anything: the numbers
are the receipts', the decision is ``evidence``'s.

A session's sample is the median of its measured requests' client wall seconds; it counts
only when every measured request returned 200 and the lifecycle is clean (a run whose
workers did not all exit cleanly does not qualify, as campaign #320's failed worker teardown
showed; a failed request leaves no denominator).  Warmups are never counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evidence.models import MediaReport, Receipt


@dataclass
class SessionView:
    """One session row: ``walls`` are the measured requests' client wall seconds as text
    (``failed`` for a failed request), ``sample_s`` the session's sample or None."""

    slot: int
    arm: str
    session_id: str
    walls: list[str]
    http: list[str]
    lifecycle_clean: bool
    lifecycle_problems: list[str]
    sample_s: float | None
    ok_walls: list[float] = field(default_factory=list)
    letter: str = "A"
    """The session's letter in the screen's order: A control, B candidate (or, in a
    control-vs-control screen, the second control)."""

    @property
    def chart_value(self) -> str:
        """Value plotted for this session: the median of its successful measured requests
        (shown even when the session does not qualify; the table says why), else 0."""
        if self.ok_walls:
            return f"{statistics.median(self.ok_walls):.3f}"
        return "0"


@dataclass
class ArmView:
    """One arm: its qualified session samples (seconds) and their median."""

    arm: str
    samples: list[float]

    @property
    def median_s(self) -> float | None:
        """Median of the samples; None without any."""
        return statistics.median(self.samples) if self.samples else None


@dataclass
class GateView:
    """One quality-gate line: output compared, metric, value, op, threshold, passed."""

    output: str
    name: str
    value: str
    op: str
    threshold: str
    passed: bool | None


@dataclass
class Decision:
    """What ``evidence`` decided for this screen (verdict words of :mod:`evidence.verdicts`:
    SUPPORTED, FAILED, INCONCLUSIVE, REJECTED; plus REFUSED for an unverifiable bundle)."""

    verdict: str
    reasons: list[str]
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    no_ratio_reason: str = "no qualified sample in one arm"
    shown: str | None = None
    """The verdict as shown, e.g. ``SUPPORTED (provisional)``; None: ``verdict``."""
    memo: dict[str, Any] = field(default_factory=dict)
    """What later screens need of this one (:mod:`bot.features.screen.followup`)."""


@dataclass
class ResultView:
    """Everything ``screen_result.md.j2`` shows."""

    label: str
    name: str
    arm_b_label: str
    campaign: str
    track: str
    quality_mode: str
    target_reduction: float
    head_sha: str
    order: str
    run_url: str
    integrity: str
    sessions: list[SessionView]
    arms: list[ArmView]
    verdict: str
    reasons: list[str]
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    no_ratio_reason: str
    gates: list[GateView]
    lifecycle_summary: str
    charged_device_h: float
    charged_wall_h: float
    device_count: int
    device_left_h: float
    wall_left_h: float
    directions_left: int
    chart_max: int = field(default=1)


def session_view(r: Receipt, order: str = "") -> SessionView:
    """Summarise one receipt (see module docstring for when a session counts); ``order``
    is the screen's session order (its letter at the receipt's slot labels the session)."""
    measured = sorted(r.measured, key=lambda q: q.index)
    walls = [
        f"{q.client_wall_s:.3f}" if q.ok and q.client_wall_s is not None else "failed"
        for q in measured
    ]
    http = [str(q.http_status) if q.http_status is not None else "none" for q in measured]
    problems = r.lifecycle.problems()
    ok_walls: list[float] = [
        q.client_wall_s for q in measured if q.ok and q.client_wall_s is not None
    ]
    qualified = bool(measured) and len(ok_walls) == len(measured) and not problems
    sample = statistics.median(ok_walls) if qualified else None
    letter = order[r.slot] if 0 <= r.slot < len(order) else ("A" if r.arm == "control" else "B")
    return SessionView(
        r.slot, r.arm, r.session_id, walls, http, not problems, problems, sample, ok_walls,
        letter,
    )


def gate_views(reports: Sequence[tuple[str, MediaReport]]) -> list[GateView]:
    """Flatten media reports into gate lines (bit-exact comparisons as one line each)."""
    out: list[GateView] = []
    for path, rep in reports:
        if rep.bit_exact is not None:
            be = rep.bit_exact
            ok = be.frames_equal and be.pcm_equal is not False
            out.append(GateView(path, "bit-exact frames+PCM", str(ok).lower(), "==", "true", ok))
        for m in rep.metrics:
            if m.value is None:
                value = "not computed"
            elif math.isinf(m.value):
                value = "inf"
            else:
                value = f"{m.value:.4g}"
            thr = (
                "-"
                if m.threshold is None
                else (
                    "[" + ", ".join(f"{t:g}" for t in m.threshold) + "]"
                    if isinstance(m.threshold, list)
                    else f"{m.threshold:g}"
                )
            )
            out.append(GateView(path, m.name, value, m.op or "", thr, m.passed))
        for c in rep.structural:
            if not c.passed:
                out.append(GateView(path, c.name, c.actual or "", "==", c.expected or "", False))
    return out


def lifecycle_summary(sessions: Sequence[SessionView]) -> str:
    """One paragraph: how many sessions had a clean lifecycle, and each problem."""
    bad = [s for s in sessions if not s.lifecycle_clean]
    if not sessions:
        return "No session receipts in the bundle."
    if not bad:
        return (
            f"All {len(sessions)} sessions shut down cleanly: every worker exited 0, no forced "
            "terminate or kill, server exit 0, devices idle before and after."
        )
    lines = [f"{len(bad)} of {len(sessions)} sessions do not qualify:"]
    for s in bad:
        lines.append(f"session {s.slot + 1} ({s.arm}): {'; '.join(s.lifecycle_problems)}")
    return " ".join(lines[:1]) + "\n" + "\n".join(f"- {x}" for x in lines[1:])


def build_result(
    *,
    label: str,
    name: str,
    kind: str,
    campaign: str,
    track: str,
    quality_mode: str,
    target_reduction: float,
    head_sha: str,
    order: str,
    run_url: str,
    integrity: str,
    receipts: Sequence[Receipt],
    media: Sequence[tuple[str, MediaReport]],
    decision: Decision,
    charged_wall_s: float,
    device_count: int,
    device_left_h: float,
    wall_left_h: float,
    directions_left: int,
) -> ResultView:
    """Assemble the result view (units: seconds in, hours out for budget figures)."""
    sessions = [session_view(r, order) for r in sorted(receipts, key=lambda r: r.slot)]
    arms = [
        ArmView(arm, [s.sample_s for s in sessions if s.arm == arm and s.sample_s is not None])
        for arm in ("control", "candidate")
    ]
    top = max([max(s.ok_walls, default=0.0) for s in sessions] + [1.0])
    return ResultView(
        label=label,
        name=name,
        arm_b_label="second control" if kind == "control" else "candidate",
        campaign=campaign,
        track=track,
        quality_mode=quality_mode,
        target_reduction=target_reduction,
        head_sha=head_sha,
        order=order,
        run_url=run_url,
        integrity=integrity,
        sessions=sessions,
        arms=arms,
        verdict=decision.shown or decision.verdict,
        reasons=decision.reasons,
        ratio=decision.ratio,
        ratio_low=decision.ratio_low,
        ratio_high=decision.ratio_high,
        no_ratio_reason=decision.no_ratio_reason,
        gates=gate_views(media),
        lifecycle_summary=lifecycle_summary(sessions),
        charged_device_h=charged_wall_s * device_count / 3600.0,
        charged_wall_h=charged_wall_s / 3600.0,
        device_count=device_count,
        device_left_h=device_left_h,
        wall_left_h=wall_left_h,
        directions_left=directions_left,
        chart_max=int(math.ceil(top * 1.1)),
    )
