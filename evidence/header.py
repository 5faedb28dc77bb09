"""The campaign status header's content, computed from evidence.  Pure: plain data
in, a :class:`HeaderContent` out; rendering is ``templates/campaign_header.md.j2``.

What goes in:

- the campaign scope (tracks, targets, budget, requesters);
- one :class:`EvidenceSource` per place evidence was read: the default branch at the last
  commit that touched the campaign, and each candidate PR (a PR that touches the campaign's
  evidence paths) at its head SHA.  Each source carries the per-track verdicts and screening
  decisions that the verdict engine (``evidence.verdicts`` / ``evidence.screening``) computed
  from that source's receipts, converted by :func:`track_verdict_from` style adapters into
  :class:`TrackVerdict` / :class:`ScreenDecision`;
- the budget usage and the screen queue (from the bot's screen queue when there is one);
- the evidence reference (SHA, commit date, URL).

What comes out: Current state (one or two sentences), Decision needed, Next action, the
per-track board (best qualified candidate, its verdict, ratio with exact bounds, m vs n, PR),
the candidates table, the budget and the queue.

Rules:

- Nothing here computes a verdict.  A verdict shown is the engine's own value for that
  (candidate, track), so the header can never say SUPPORTED where the engine does not.
- Screening decisions (PROMOTE_TO_FULL_SCREEN / REJECT / CONTINUE) are shown as screening,
  never as a verdict.
- Percentages of separate screens are never added; a board row shows one candidate's own A/B.
- A failed control (baseline) session is reported as such, with what would fix it.
- The header depends only on its inputs (no clock): the same evidence renders the same text,
  so an unchanged refresh writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from evidence.models import CampaignScope, Finding, Receipt

VerdictValue = Literal["SUPPORTED", "FAILED", "INCONCLUSIVE", "EQUIVALENT", "NOT SHOWN"]
ScreenValue = Literal["PROMOTE_TO_FULL_SCREEN", "REJECT", "CONTINUE"]

LIFECYCLE_FIX = (
    "a session qualifies only when every worker exits 0 with no signal, no terminate or kill "
    "action is needed, and the server and container exit 0"
)
"""Source: the verdict engine's validity gate (:mod:`evidence.verdicts`, gate 1); campaign
#320's 5 s baseline, whose four workers needed terminate and kill actions, is the case."""


@dataclass(frozen=True)
class Reason:
    """A machine-readable reason ``code`` with its one-line human ``text``."""

    code: str
    text: str


@dataclass(frozen=True)
class TrackVerdict:
    """The verdict engine's result for one candidate on one track, as the header shows it.

    ``ratio`` is the Hodges-Lehmann estimate of candidate/control latency (dimensionless,
    < 1 is faster), ``lower``/``upper`` its exact distribution-free bounds at ``confidence``
    (e.g. 0.95); any of them is None when the engine gave none (e.g. underpowered design).
    ``m``/``n`` are the counted control/candidate sessions.
    """

    candidate: str
    track: str
    verdict: VerdictValue
    reasons: tuple[Reason, ...] = ()
    ratio: float | None = None
    lower: float | None = None
    upper: float | None = None
    confidence: float | None = None
    m: int = 0
    n: int = 0
    regression: bool = False
    confirmation: str | None = None
    """``provisional``, ``confirmed`` or ``not confirmed`` for a SUPPORTED verdict."""

    @property
    def shown(self) -> str:
        """``SUPPORTED (provisional)`` and the like, else the verdict."""
        return f"{self.verdict} ({self.confirmation})" if self.confirmation else self.verdict
    summary: str = ""


@dataclass(frozen=True)
class ScreenDecision:
    """A screening decision (never a verdict) for one candidate on one track."""

    candidate: str
    track: str
    decision: ScreenValue
    reason: str = ""


@dataclass
class EvidenceSource:
    """Evidence read at one git revision: the default branch (``pr`` None) or a candidate PR.

    ``sha`` is the revision read (the PR head SHA for a PR); ``receipts`` its verified
    receipts; ``verdicts``/``screens`` the engine's results on them; ``findings`` the review
    findings (:mod:`evidence.findings` rules) with their resolutions.
    """

    sha: str
    pr: int | None = None
    pr_title: str | None = None
    receipts: list[Receipt] = field(default_factory=list)
    verdicts: list[TrackVerdict] = field(default_factory=list)
    screens: list[ScreenDecision] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unverified_sessions: set[tuple[str, str]] = field(default_factory=set)
    """``(screen_id, session_id)`` of receipts whose manifest entry did not verify: listed in
    ``receipts`` (they are charged) but never qualifying (:mod:`evidence.sessions`)."""


@dataclass(frozen=True)
class BudgetLine:
    """One budget dimension: ``used`` of ``allowed`` in ``unit`` (hours or directions)."""

    name: str
    used: float
    allowed: float
    unit: str
    reserved: float = 0.0
    """Held by queued or running screens (their estimates), not yet charged."""

    @property
    def exhausted(self) -> bool:
        """True when ``used`` plus ``reserved`` has reached ``allowed`` (a zero allowance
        counts as reached)."""
        return self.used + self.reserved >= self.allowed


@dataclass(frozen=True)
class QueueItem:
    """A queued, running or approval-waiting screen.

    ``state`` is one of ``running``, ``queued``, ``awaiting-approval``; ``waits_on`` names who
    or what it waits on (a pool, a requester's approval of head SHA ...).
    """

    candidate: str
    track: str | None
    state: str
    pr: int | None = None
    head_sha: str | None = None
    pool: str | None = None
    waits_on: str = ""


@dataclass(frozen=True)
class ScreenOutcome:
    """A screen the bot ran and finished (the bot's screen record): ``label`` (e.g. ``S12``),
    ``verdict`` as the bot recorded it from the verified bundle (the verdict engine's value,
    or ``REFUSED`` / ``NOT COUNTED``), ``conclusion`` of the workflow run, ``finished`` its
    completion time.  Shown in Current state until its receipts are committed."""

    label: str
    candidate: str
    track: str
    verdict: str
    conclusion: str
    pr: int | None = None
    head_sha: str | None = None
    finished: datetime | None = None


@dataclass(frozen=True)
class EvidenceRef:
    """The evidence the header was computed from: ``sha`` (last default-branch commit that
    touched the campaign), its commit time ``at``, and a ``url`` to the campaign at that SHA."""

    sha: str
    at: datetime
    url: str | None = None


@dataclass(frozen=True)
class BoardRow:
    """One track of the board: the best qualified candidate and its own A/B result."""

    track: str
    target: str
    quality_mode: str
    baseline: str
    candidate: str | None
    verdict: str
    ratio: str
    m_vs_n: str
    pr: int | None
    reason: str


@dataclass(frozen=True)
class CandidateRow:
    """One candidate of one source: PR, head SHA read, screening, verdicts per track."""

    candidate: str
    pr: int | None
    head_sha: str
    screening: str
    verdicts: dict[str, str]
    source: str


@dataclass
class HeaderContent:
    """Everything the header template shows; every figure traces to a receipt or verdict."""

    campaign_id: str
    title: str
    current_state: str
    decision_needed: str
    next_action: str
    tracks: list[str]
    board: list[BoardRow]
    candidates: list[CandidateRow]
    budget: list[BudgetLine]
    queue: list[QueueItem] | None
    evidence: EvidenceRef
    problems: list[str]
    awaiting_confirmation: list[str] = field(default_factory=list)
    """``CANDIDATE on TRACK (PR #N)`` of every SUPPORTED still provisional: the confirmation
    screen against the original control (``/screen confirm CANDIDATE``) is still to run
    (docs/verdict-statistics.md, campaign-level error control)."""


# ------------------------------------------------------------------------------ helpers

_VERDICT_RANK = {"SUPPORTED": 0, "EQUIVALENT": 0, "INCONCLUSIVE": 1, "NOT SHOWN": 1,
                 "FAILED": 2}


def short_sha(sha: str) -> str:
    """First 8 hex digits of a commit id."""
    return sha[:8]


def fmt_ratio(v: TrackVerdict) -> str:
    """``0.912x [0.880, 0.951] (95.1 %)`` or ``0.912x (no exact bounds)`` or ``-``."""
    if v.ratio is None:
        return "-"
    text = f"{v.ratio:.3f}x"
    if v.lower is not None and v.upper is not None:
        text += f" [{v.lower:.3f}, {v.upper:.3f}]"
        if v.confidence is not None:
            text += f" ({v.confidence * 100:.1f} %)"
    else:
        text += " (no exact bounds)"
    return text


def _best(verdicts: Iterable[tuple[EvidenceSource, TrackVerdict]]):
    """Best candidate on a track: SUPPORTED first, then INCONCLUSIVE, then FAILED; within a
    rank the lowest ratio (None last); ties by candidate name for a stable text."""
    ranked = sorted(
        verdicts,
        key=lambda sv: (
            _VERDICT_RANK.get(sv[1].verdict, 9),
            sv[1].ratio if sv[1].ratio is not None else float("inf"),
            sv[1].candidate,
            sv[0].pr or 0,
        ),
    )
    return ranked[0] if ranked else None


def session_hours(r: Receipt) -> float:
    """Hours one session held its devices: ``stopped_at`` (else the last request's
    ``finished_at``) minus ``started_at``; 0 when neither end is recorded."""
    end = r.stopped_at
    if end is None:
        ends = [q.finished_at for q in r.requests if q.finished_at is not None]
        end = max(ends) if ends else None
    if end is None:
        return 0.0
    return max(0.0, (end - r.started_at).total_seconds() / 3600.0)


def budget_from_receipts(scope: CampaignScope, receipts: Sequence[Receipt]) -> list[BudgetLine]:
    """Budget used, from receipts alone (failures and retries included, as
    campaign #297's budget states).

    directions: distinct candidate names screened; wall-hours: sum of session hours; device
    hours: session hours times the session's device count (``devices`` of the receipt, else
    the scope pool's ``device_count``).  Each session (``screen_id``, ``session_id``) counts
    once even when it appears in several sources.
    """
    seen: dict[tuple[str, str], Receipt] = {}
    for r in receipts:
        seen.setdefault((r.screen_id, r.session_id), r)
    directions = {r.candidate for r in seen.values() if r.arm == "candidate" and r.candidate}
    wall = sum(session_hours(r) for r in seen.values())
    dev = sum(session_hours(r) * (len(r.devices) or scope.pool.device_count) for r in seen.values())
    b = scope.budget
    return [
        BudgetLine(
            "candidate directions", float(len(directions)), float(b.candidate_directions), ""
        ),
        BudgetLine("wall-hours", round(wall, 2), b.wall_hours, "h"),
        BudgetLine("device-hours", round(dev, 2), b.device_hours, "h"),
    ]


def _baseline_problems(scope: CampaignScope, receipts: Sequence[Receipt]) -> dict[str, list[str]]:
    """Per track: one line per control session whose lifecycle does not qualify."""
    out: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for r in sorted(receipts, key=lambda r: (r.started_at, r.session_id)):
        key = (r.screen_id, r.session_id)
        if r.arm != "control" or key in seen:
            continue
        seen.add(key)
        probs = r.lifecycle.problems()
        if probs:
            out.setdefault(r.track, []).append(
                f"control session {r.session_id} of screen {r.screen_id} failed its lifecycle "
                f"({'; '.join(compact_problems(probs))})"
            )
    return out


_WORKER = re.compile(r"^worker (?:rank|pid) \S+ (.+)$")


def compact_problems(problems: Sequence[str]) -> list[str]:
    """:meth:`Lifecycle.problems` with identical worker lines counted once: four lines
    ``worker rank N still running`` become ``4 workers still running``."""
    counts: dict[str, int] = {}
    out: list[str | tuple[str]] = []
    for p in problems:
        m = _WORKER.match(p)
        if m is None:
            out.append(p)
            continue
        what = m.group(1)
        if what not in counts:
            out.append((what,))
        counts[what] = counts.get(what, 0) + 1
    return [p if isinstance(p, str) else
            f"{counts[p[0]]} worker{'s' if counts[p[0]] > 1 else ''} {p[0]}" for p in out]


def _track_label(scope: CampaignScope, track_id: str) -> str:
    t = scope.track(track_id)
    d = f"{t.duration_s:g} s"
    return f"{track_id} ({d} {t.quality_mode})"


def _mention(logins: Sequence[str]) -> str:
    return ", ".join(f"@{x}" for x in logins)


# ------------------------------------------------------------------------------ builder


def build_header(
    scope: CampaignScope,
    sources: Sequence[EvidenceSource],
    evidence: EvidenceRef,
    *,
    budget: Sequence[BudgetLine] | None = None,
    queue: Sequence[QueueItem] | None = None,
    finished: Sequence[ScreenOutcome] = (),
) -> HeaderContent:
    """Compute the header content.

    ``sources``: the default-branch source first (``pr`` None), then candidate PRs in any
    order (sorted here by PR number).  ``budget``: the budget lines from the bot's budget
    ledger; None computes them from every source's receipts (:func:`budget_from_receipts`).
    ``queue``: the screen queue; None means the queue is unknown (no queue service), shown as
    such, and an empty list means nothing is queued.  ``finished``: screens the bot finished,
    newest first (the newest one is the "latest screen" of Current state).
    Raises KeyError when a verdict names a track that the scope does not have.
    """
    srcs = [_only_new_candidates(s, sources) for s in
            sorted(sources, key=lambda s: (s.pr is not None, s.pr or 0))]
    all_receipts = [r for s in srcs for r in s.receipts]
    budget_lines = list(budget) if budget is not None else budget_from_receipts(scope, all_receipts)
    track_ids = [t.id for t in scope.tracks]
    for s in srcs:
        for v in s.verdicts:
            scope.track(v.track)
        for d in s.screens:
            scope.track(d.track)

    # ---- board
    board: list[BoardRow] = []
    from evidence.sessions import session_counts

    baseline_problems = _baseline_problems(scope, all_receipts)
    counts = session_counts(((r, None) for r in all_receipts),
                            [k for s in srcs for k in s.unverified_sessions])
    for t in scope.tracks:
        tv = [(s, v) for s in srcs for v in s.verdicts if v.track == t.id]
        best = _best(tv)
        clean = counts.qualifying_controls(t.id)
        base = f"{clean} clean control session(s)"
        if t.id in baseline_problems:
            base += f", {len(baseline_problems[t.id])} failed lifecycle"
        if best is None:
            board.append(
                BoardRow(
                    t.id, t.target_text, t.quality_mode, base, None,
                    "no verdict", "-", "-", None, "no candidate screened on this track",
                )
            )
            continue
        s, v = best
        reason = v.summary or (v.reasons[0].text if v.reasons else "")
        board.append(
            BoardRow(
                t.id, t.target_text, t.quality_mode, base, v.candidate,
                v.shown + (" (REGRESSION)" if v.regression else ""), fmt_ratio(v),
                f"{v.m} vs {v.n}", s.pr, reason,
            )
        )

    # ---- candidates
    cands: list[CandidateRow] = []
    for s in srcs:
        names = sorted(
            {v.candidate for v in s.verdicts}
            | {d.candidate for d in s.screens}
            | {r.candidate for r in s.receipts if r.arm == "candidate" and r.candidate}
        )
        for name in names:
            screens = [d for d in s.screens if d.candidate == name]
            screening = "; ".join(f"{d.track}: {d.decision}" for d in screens) or "-"
            verdicts = {
                tid: next(
                    (v.shown for v in s.verdicts if v.candidate == name and v.track == tid),
                    "-",
                )
                for tid in track_ids
            }
            try:
                src = scope.candidate(name).source or "-"
            except KeyError:
                src = "not in campaign.toml"
            cands.append(CandidateRow(name, s.pr, short_sha(s.sha), screening, verdicts, src))

    # ---- state sentences
    problems = [p for tid in track_ids for p in baseline_problems.get(tid, [])]
    parts = []
    for row in board:
        if row.candidate is None:
            parts.append(f"{row.track} has no candidate verdict")
        else:
            pr = f", PR #{row.pr}" if row.pr else ""
            parts.append(f"{row.track} {row.verdict} ({row.candidate}{pr}, {row.m_vs_n})")
    sentence1 = "Overall verdict per track: " + "; ".join(parts) + "."
    sentence2 = _latest_screen_sentence(srcs, queue, finished)
    failed_tracks = [tid for tid in track_ids if tid in baseline_problems]
    if len(failed_tracks) == 1:
        sentence1 += (f" The control baseline of {_track_label(scope, failed_tracks[0])} "
                      "failed its lifecycle, so no verdict on it can qualify yet.")
    elif failed_tracks:
        labels = [_track_label(scope, tid) for tid in failed_tracks]
        sentence1 += (" The control baselines of " + ", ".join(labels[:-1]) + " and "
                      + labels[-1] + " failed their lifecycles, so no verdict on those tracks "
                      "can qualify yet.")
    current_state = sentence1 + (" " + sentence2 if sentence2 else "")

    # ---- decision needed
    decisions: list[str] = []
    exhausted = [b for b in budget_lines if b.exhausted]
    if exhausted:
        what = ", ".join(
            f"{b.name} {b.used:g}{b.unit}"
            + (f" + {b.reserved:g}{b.unit} reserved" if b.reserved else "")
            + f" of {b.allowed:g}{b.unit}"
            for b in exhausted
        )
        decisions.append(
            f"budget exhausted ({what} used): {_mention(scope.requesters)} decide whether to "
            "extend the budget or stop the campaign"
        )
    for row_track in track_ids:
        refreeze = [
            v
            for s in srcs
            for v in s.verdicts
            if v.track == row_track and any("REPEAT" in r.code.upper() for r in v.reasons)
        ]
        if refreeze:
            decisions.append(
                f"{row_track}: control runs differ from each other in decoded output, so "
                "lossless cannot be shown; the requesters decide whether to re-freeze this "
                "track's quality gate"
            )
    for q in queue or []:
        if q.state == "awaiting-approval":
            sha = f" head {short_sha(q.head_sha)}" if q.head_sha else ""
            pr = f" PR #{q.pr}" if q.pr else ""
            decisions.append(
                f"approve screening candidate {q.candidate} on{pr}{sha} "
                f"({_mention(scope.requesters)} or a maintainer)"
            )
    decision_needed = "; ".join(decisions) if decisions else "none"

    # ---- next action
    next_action = _next_action(scope, board, queue, baseline_problems, srcs, exhausted)
    awaiting = awaiting_confirmation(srcs)

    return HeaderContent(
        campaign_id=scope.id,
        title=scope.title,
        current_state=current_state,
        decision_needed=decision_needed,
        next_action=next_action,
        tracks=track_ids,
        board=board,
        candidates=cands,
        budget=budget_lines,
        queue=list(queue) if queue is not None else None,
        evidence=evidence,
        problems=problems,
        awaiting_confirmation=awaiting,
    )


def _only_new_candidates(
    src: EvidenceSource, all_sources: Sequence[EvidenceSource]
) -> EvidenceSource:
    """A PR's candidates are those with candidate sessions that the default branch does not
    hold: a PR branched from the default branch carries its receipts too, and those belong to
    the default branch's rows (its receipts are counted there, once)."""
    base = next((s for s in all_sources if s.pr is None), None)
    if src.pr is None or base is None:
        return src
    on_base = {(r.screen_id, r.session_id) for r in base.receipts}
    new = {
        r.candidate
        for r in src.receipts
        if r.arm == "candidate" and r.candidate and (r.screen_id, r.session_id) not in on_base
    }
    return EvidenceSource(
        sha=src.sha, pr=src.pr, pr_title=src.pr_title,
        receipts=[r for r in src.receipts if (r.screen_id, r.session_id) not in on_base],
        verdicts=[v for v in src.verdicts if v.candidate in new],
        screens=[d for d in src.screens if d.candidate in new],
        findings=src.findings,
        unverified_sessions=src.unverified_sessions - on_base,
    )


def _latest_screen_sentence(
    srcs: Sequence[EvidenceSource],
    queue: Sequence[QueueItem] | None,
    finished: Sequence[ScreenOutcome] = (),
) -> str:
    if finished:
        f = finished[0]
        bits = ([f"PR #{f.pr}"] if f.pr else []) + (
            [f"head {short_sha(f.head_sha)}"] if f.head_sha else [])
        where = f" ({', '.join(bits)})" if bits else ""
        when = f" on {f.finished:%Y-%m-%d %H:%M} UTC" if f.finished else ""
        return (
            f"Latest screen: {f.label}, {f.candidate} on {f.track}{where}, finished{when}: "
            f"{f.verdict} (run {f.conclusion}; verified bundle, judged by the bot)."
            + _queue_sentence(queue)
        )
    latest: tuple[datetime, EvidenceSource, Receipt] | None = None
    for s in srcs:
        for r in s.receipts:
            if r.arm == "candidate" and (latest is None or r.started_at > latest[0]):
                latest = (r.started_at, s, r)
    out = ""
    if latest is not None:
        _, s, r = latest
        where = f" (PR #{s.pr})" if s.pr else " (default branch)"
        decision = next(
            (d for d in s.screens if d.candidate == r.candidate and d.track == r.track), None
        )
        verdict = next(
            (v for v in s.verdicts if v.candidate == r.candidate and v.track == r.track), None
        )
        found = []
        if decision is not None:
            reason = decision.reason if len(decision.reason) <= 160 else (
                decision.reason[:157].rstrip() + "..."
            )
            why = f": {reason}" if reason else ""
            found.append(f"screening {decision.decision}{why}")
        if verdict is not None:
            found.append(f"verdict {verdict.verdict}")
        found_txt = "; ".join(found) if found else "no verdict yet"
        out = f"Latest screen: {r.candidate} on {r.track}{where}, {found_txt}."
    return (out + _queue_sentence(queue)).strip()


def _queue_sentence(queue: Sequence[QueueItem] | None) -> str:
    if queue is None:
        return " Screen queue: unknown."
    running = [q for q in queue if q.state == "running"]
    queued = [q for q in queue if q.state != "running"]
    if running or queued:
        return f" {len(running)} screen(s) running, {len(queued)} queued."
    return " Nothing is queued or running."


def awaiting_confirmation(srcs: Sequence[EvidenceSource]) -> list[str]:
    """``CANDIDATE on TRACK (PR #N)`` for each SUPPORTED (provisional) verdict of the
    sources, in track then candidate order, once each (the newest source's row wins)."""
    seen: dict[tuple[str, str], str] = {}
    for src in srcs:
        for v in src.verdicts:
            if v.verdict == "SUPPORTED" and v.confirmation == "provisional":
                pr = f" (PR #{src.pr})" if src.pr else ""
                seen.setdefault((v.track, v.candidate), f"{v.candidate} on {v.track}{pr}")
    return [seen[k] for k in sorted(seen)]


def _next_action(
    scope: CampaignScope,
    board: Sequence[BoardRow],
    queue: Sequence[QueueItem] | None,
    baseline_problems: dict[str, list[str]],
    srcs: Sequence[EvidenceSource],
    exhausted: Sequence[BudgetLine],
) -> str:
    if baseline_problems:
        first = next(iter(baseline_problems.values()))[0]
        session = first.split(" ", 3)[2]
        resolution = next(
            (
                f.resolution
                for s in srcs
                for f in s.findings
                if f.rule == "LIFECYCLE_FAILED"
                and f.resolution
                and f"session {session} " in f.message
            ),
            None,
        )
        tracks = ", ".join(_track_label(scope, tid) for tid in baseline_problems)
        what = first.split("(", 1)[1][:-1]
        return (
            f"Fix the baseline: re-run the control baseline of {tracks} with a clean "
            f"shutdown (first failure: {what}); "
            + (resolution if resolution else LIFECYCLE_FIX)
            + ". Waits on: the campaign owner."
        )
    if queue:
        order = {"running": 0, "queued": 1, "awaiting-approval": 2}
        q = sorted(queue, key=lambda q: order.get(q.state, 3))[0]
        track = f" on {q.track}" if q.track else ""
        pr = f" (PR #{q.pr})" if q.pr else ""
        verb = {"running": "Screen running", "queued": "Next queued screen"}.get(
            q.state, "Screen awaiting approval"
        )
        waits = f" Waits on: {q.waits_on}." if q.waits_on else ""
        return f"{verb}: {q.candidate}{track}{pr}.{waits}"
    if exhausted:
        return (
            "No screen can start until the budget is extended. Waits on: "
            + _mention(scope.requesters)
            + "."
        )
    provisional = [r for r in board if r.verdict == "SUPPORTED (provisional)" and r.candidate]
    if provisional:
        r = provisional[0]
        pr = f" on PR #{r.pr}" if r.pr else ""
        return (f"Confirm {r.candidate} on {r.track}: `/screen confirm {r.candidate}`{pr} "
                "runs the confirmation screen against the original control (its SUPPORTED "
                "is provisional until then). Waits on: the campaign owner.")
    open_tracks = [r.track for r in board
                   if r.verdict not in ("SUPPORTED (confirmed)", "EQUIVALENT")]
    if open_tracks:
        known = "unknown queue; " if queue is None else ""
        return (
            f"{known}Plan a screen (`/screen` on a candidate PR) for "
            + ", ".join(open_tracks)
            + ". Waits on: the campaign owner."
        )
    return (
        "Every track has a SUPPORTED candidate; the final combination needs its own direct A/B "
        "and acceptance stays with " + _mention(scope.requesters) + "."
    )


# ------------------------------------------------------------------- engine adapters


def track_verdict_from(v: Any) -> TrackVerdict | None:
    """Convert one ``evidence.verdicts.TrackVerdict`` into the header's view; None
    for rows without a candidate (``NO_CANDIDATE`` / ``NO_SESSIONS``: no candidate verdict).
    The verdict value, ratio, bounds and m/n are copied, never recomputed."""
    if v.candidate is None:
        return None
    return TrackVerdict(
        candidate=v.candidate,
        track=v.track,
        verdict=v.verdict,
        reasons=tuple(Reason(r.code, r.text) for r in v.reasons),
        ratio=v.ratio,
        lower=v.lower,
        upper=v.upper,
        confidence=v.confidence,
        m=v.m,
        n=v.n,
        regression=bool(v.regression),
        confirmation=getattr(v, "confirmation", None),
        summary=v.summary,
    )


def screen_decisions_from(ev: Any) -> list[ScreenDecision]:
    """Screening decisions of :func:`evidence.screening.screen_decisions` for an
    ``evidence.verdicts.Evidence``: the last screen's decision per (candidate, track)."""
    from evidence.screening import screen_decisions

    return latest_screen_decisions(screen_decisions(ev))


def latest_screen_decisions(decisions: Iterable[Any]) -> list[ScreenDecision]:
    """The last of ``decisions`` (:class:`evidence.screening.ScreeningDecision`, in the
    engine's order) per (candidate, track), as the header shows them."""
    latest: dict[tuple[str, str], ScreenDecision] = {}
    for d in decisions:
        latest[(d.candidate, d.track)] = ScreenDecision(d.candidate, d.track, d.decision, d.reason)
    return list(latest.values())


def unverified_receipts(loaded: Any) -> set[str]:
    """Bundle paths whose manifest entry does not match the file (the manifest
    verifier, :func:`evidence.manifest.verify_tree`).
    Files not present (media the header does not fetch) are not counted here: the PR review
    and ``campaign-bot check`` verify the whole bundle."""
    from evidence.manifest import verify_tree

    res = verify_tree(
        loaded.root, index=getattr(loaded, "index", None),
        json_docs=getattr(loaded, "json_docs", None),
    )
    return {f.path for f in res.findings if f.rule == "MANIFEST_MISMATCH"}


def source_from_campaign(
    loaded: Any, *, sha: str, pr: int | None = None, unverified: Iterable[str] | None = None
) -> EvidenceSource:
    """Run the verdict engine on one loaded campaign (an :class:`evidence.bundle.LoadedCampaign`)
    read at ``sha`` (a PR head for ``pr``): verdicts, screening decisions and review findings.
    ``unverified``: bundle paths whose manifest entry did not verify (their sessions do not
    qualify); None runs the manifest verifier on ``loaded.root``.  Raises ValueError without a
    valid scope.
    """
    from evidence.findings import review_findings
    from evidence.verdicts import Evidence, judge

    unverified = set(unverified_receipts(loaded) if unverified is None else unverified)
    ev = Evidence.from_loaded(loaded, unverified=unverified)
    raw = judge(ev)
    from evidence.screening import screen_decisions

    screenings = screen_decisions(ev)
    findings = list(getattr(loaded, "findings", []) or []) + review_findings(ev, raw, screenings)
    return EvidenceSource(
        sha=sha,
        pr=pr,
        receipts=[d.model for d in loaded.receipts],
        unverified_sessions={(d.model.screen_id, d.model.session_id) for d in loaded.receipts
                             if d.path in unverified},
        verdicts=[tv for v in raw if (tv := track_verdict_from(v)) is not None],
        screens=screen_decisions_from(ev),
        findings=findings,
    )
