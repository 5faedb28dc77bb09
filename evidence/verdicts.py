"""Per-track verdicts: ``SUPPORTED`` / ``FAILED`` / ``INCONCLUSIVE`` with reason codes.

Pure: a campaign scope, receipts and media reports in (plain lists, or the ``Doc`` lists of a
:class:`~evidence.bundle.LoadedCampaign`), a list of :class:`TrackVerdict` out.

One verdict per (track, candidate): all screens of that candidate on that track, with the
control sessions of those same screens.  A track with receipts but no candidate gets one row
with ``candidate = None`` (``NO_CANDIDATE``); a scope track with no receipts gets
``NO_SESSIONS``.

The unit is the independent server session: each contributes the median of its measured
(post-warmup) client wall seconds; requests are never pooled as independent samples.

Gates, in order; a failing gate makes the verdict INCONCLUSIVE with its reason, except that a
failed quality gate makes it FAILED (quality) whatever the speed.  Every gate is evaluated and
every reason listed; the first failing gate decides.

1. validity: manifests verify; every request of every session returned HTTP 200 with timing;
   every lifecycle is clean (:meth:`Lifecycle.problems`); campaign, track, pool, arm/slot,
   control revision, config digests, candidate name and input digests match the scope.
2. quality: lossless tracks need bit-exact equality with control AND control repeatability
   (two control sessions with equal decoded output); lossy tracks need every perceptual gate
   of the scope (re-checked against the scope's thresholds, not the report's).
3. design: at least ``protocol.min_measured_sessions_per_arm`` sessions per arm, a balanced
   order (each arm's mean slot within one slot of the other's, per screen), at least one (and
   at least ``protocol.warmups_per_session``) warmup before the first measured request, and
   ``protocol.measured_requests_per_session`` measured requests per session.
4. decision (:mod:`evidence.stats`): with ``theta0 = 1 - target_reduction`` and ``u`` from the
   exact Mann-Whitney distribution, SUPPORTED iff at most ``u`` pairs have
   ``t_j / c_i >= theta0``; FAILED iff at most ``u`` pairs have ``t_j / c_i <= theta0``
   (REGRESSION flagged when even the lower bound exceeds 1); otherwise INCONCLUSIVE
   (``OVERLAP``), or ``UNDERPOWERED`` when no ``u`` exists.  When the candidate's session
   medians are more spread than control's (:func:`unequal_spread`), SUPPORTED and FAILED
   also need Welch's test to agree, else INCONCLUSIVE (``UNEQUAL_SPREAD``).

Verdicts never compose: :func:`compose_verdicts` refuses (a combination is judged only by its
own direct A/B).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from evidence import sequential, stats
from evidence.models import (
    CampaignScope,
    Lifecycle,
    MediaReport,
    Receipt,
    SequentialDesign,
    StatusSnapshot,
    Track,
)

if TYPE_CHECKING:
    from evidence.bundle import LoadedCampaign

VerdictValue = Literal["SUPPORTED", "FAILED", "INCONCLUSIVE", "EQUIVALENT", "NOT SHOWN"]
"""SUPPORTED / FAILED / INCONCLUSIVE on a speedup track; EQUIVALENT / NOT SHOWN on a
no-regression track (:class:`evidence.models.Track`)."""
Gate = Literal["validity", "quality", "design", "decision"]

PRIOR_NOISE_MIN_DIFFS = 10
"""Prior-noise mode needs at least this many historical control-vs-control log differences on
the same pool, config and track."""
PRIOR_NOISE_LABEL = (
    "prior-noise mode (model-based, optional): assumes historical control-vs-control noise "
    "describes this screen; not the exact distribution-free rule"
)
TAIL_MIN_REQUESTS = 59
"""An arm needs at least 59 measured requests before any p95/tail figure is shown: with fewer,
not even the maximum bounds the 95th percentile at 95 % confidence (1 - 0.95**58 < 0.95)."""

PERCEPTUAL_GATES: dict[str, tuple[str, ...]] = {
    "ssim_min": ("ssim_all", "ssim"),
    "psnr_min_db": ("psnr_avg_db", "psnr_db", "psnr"),
    "lpips_max": ("lpips",),
    "audio_spectral_cosine_min": (
        "audio_spectral_cosine",
        "audio_mr_spectral_cosine",
        "audio_cosine",
    ),
    "audio_rms_ratio": ("audio_rms_ratio",),
}
"""Scope gate -> metric names a media report may use for it (first match wins).  The audio
latent rate is a structural check, not a perceptual gate."""


class Reason(BaseModel):
    """One machine-readable reason ``code`` of the ``gate`` it belongs to, with a one-line
    human ``text``."""

    model_config = ConfigDict(defer_build=True)

    code: str
    gate: Gate
    text: str


class SessionSummary(BaseModel):
    """One server session as the verdict saw it.  ``median_s`` is the median of its measured
    client wall seconds, None when any measured request lacks a finite time or failed."""

    model_config = ConfigDict(defer_build=True)

    session_id: str
    screen_id: str
    arm: Literal["control", "candidate"]
    slot: int
    path: str | None = None
    median_s: float | None = None
    measured: int = 0
    warmups: int = 0


class ArmTail(BaseModel):
    """Tail latency of one arm.  Shown only with at least :data:`TAIL_MIN_REQUESTS` measured
    requests; descriptive (never used by the verdict)."""

    model_config = ConfigDict(defer_build=True)

    arm: Literal["control", "candidate"]
    measured_requests: int
    status: Literal["ok", "underpowered"]
    p95_s: float | None = Field(default=None, description="Nearest-rank p95, seconds.")
    p95_upper_bound_s: float | None = Field(
        default=None, description="Order statistic bounding p95 at 95 % confidence, seconds."
    )


class PriorNoiseResult(BaseModel):
    """Optional, clearly labelled model-based decision for small designs (never the verdict).

    ``diffs`` historical control-vs-control log differences give a session noise estimate;
    the ratio of geometric means gets a t-interval with ``diffs`` degrees of freedom."""

    model_config = ConfigDict(defer_build=True)

    label: str = PRIOR_NOISE_LABEL
    diffs: int
    ratio: float
    lower: float
    upper: float
    confidence: float
    decision: VerdictValue


class LookSummary(BaseModel):
    """One look of a group-sequential series (:mod:`evidence.sequential`): cumulative
    sessions per arm ``m``/``n``, information ``fraction``, the alpha ``level`` the look may
    use, its exact boundary ``u`` (None: it cannot decide) and the exact alpha spent with it
    (``spent``, cumulative)."""

    model_config = ConfigDict(defer_build=True)

    look: int
    screen_id: str
    m: int
    n: int
    fraction: float
    level: float
    u: int | None
    spent: float


class FollowUp(BaseModel):
    """The follow-up an INCONCLUSIVE look projects (:func:`evidence.sequential.
    project_followup`): ``sessions_per_arm`` more sessions per arm (a screen of twice as many
    sessions) make ``look``, which decides with ``probability`` (conditional power on the
    observed effect and spread) at alpha ``level``; ``device_hours`` it would cost at the
    series' mean session (None when no session recorded its duration)."""

    model_config = ConfigDict(defer_build=True)

    continues: str
    look: int
    sessions_per_arm: int
    probability: float
    level: float
    device_hours: float | None = None


class TrackVerdict(BaseModel):
    """The verdict for one candidate on one track.

    Ratios are candidate/control latency (dimensionless, < 1 is faster).  ``lower``/``upper``
    are the exact one-sided bounds, each at ``confidence`` (two-sided coverage of
    ``[lower, upper]`` is ``two_sided_confidence``); None when the design has no ``u``.
    ``best_confidence`` is the most any outcome of this ``m`` vs ``n`` design could give.
    ``more_pairs_needed`` projects how many more balanced pairs would let the rule decide if
    the observed fraction of contrary pairs held (None: not within 40 pairs).
    """

    model_config = ConfigDict(defer_build=True)

    track: str
    candidate: str | None
    screens: list[str] = Field(default_factory=list)
    verdict: VerdictValue
    reasons: list[Reason] = Field(default_factory=list)
    target_reduction: float | None = None
    theta0: float | None = None
    m: int = 0
    n: int = 0
    control_medians_s: list[float] = Field(default_factory=list)
    candidate_medians_s: list[float] = Field(default_factory=list)
    ratio: float | None = Field(default=None, description="Hodges-Lehmann ratio estimate.")
    lower: float | None = None
    upper: float | None = None
    confidence: float | None = None
    two_sided_confidence: float | None = None
    u: int | None = None
    u_method: Literal["exact", "asymptotic"] = "exact"
    pairs: int = 0
    pairs_at_or_above_theta0: int | None = None
    pairs_at_or_below_theta0: int | None = None
    control_spread: float | None = Field(default=None, description="max(c) / min(c).")
    best_confidence: float | None = None
    more_pairs_needed: int | None = None
    regression: bool = False
    tail: list[ArmTail] = Field(default_factory=list)
    prior_noise: PriorNoiseResult | None = None
    sessions: list[SessionSummary] = Field(default_factory=list)
    confirmation: Literal["provisional", "confirmed", "not confirmed"] | None = Field(
        default=None, description="For a SUPPORTED verdict: whether a confirmation screen "
        "(the candidate's next screen on the track against the original control) also says "
        "SUPPORTED (see evidence.verdicts.confirmation_state).")
    confirmation_text: str | None = None
    series: list[str] = Field(default_factory=list, description="Group-sequential designs: "
                              "the screens of the series that decides, look 1 first.")
    looks: list[LookSummary] = Field(default_factory=list)
    alpha_level: float | None = Field(default=None, description="Group-sequential designs: "
                                      "the alpha the deciding look used.")
    alpha_spent: float | None = Field(default=None, description="Group-sequential designs: "
                                      "exact alpha spent by all looks so far.")
    followup: FollowUp | None = None

    @property
    def shown(self) -> str:
        """The verdict as every view prints it: ``SUPPORTED (provisional)``, ``SUPPORTED
        (confirmed)``, ``SUPPORTED (not confirmed)``, else the verdict."""
        return f"{self.verdict} ({self.confirmation})" if self.confirmation else self.verdict

    @property
    def codes(self) -> list[str]:
        """Reason codes in order."""
        return [r.code for r in self.reasons]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> str:
        """One line: the deciding reason's text (also in ``--json``)."""
        d = self.deciding
        return d.text if d is not None else self.verdict

    @property
    def deciding(self) -> Reason | None:
        """The reason that decides the verdict: the first failing quality reason of a FAILED
        verdict, else the first reason of a gate before the decision, else the decision's own
        reason; None when there is no reason at all."""
        deciding = [r for r in self.reasons if r.gate != "decision"] or self.reasons
        if self.verdict == "FAILED":
            deciding = [r for r in self.reasons if r.code in FAILING_CODES] or deciding
        return deciding[0] if deciding else None


UNREADABLE_RULES = frozenset({"SCHEMA_INVALID", "JSON_INVALID", "UNREADABLE", "FILE_TOO_LARGE"})
"""Loader finding rules (:mod:`evidence.bundle`) after which a receipt file is absent from the
typed lists."""


class CompositionRefused(ValueError):
    """Raised when asked to combine verdicts or gains of separate screens."""


FAILING_CODES = {"LOSSLESS_MISMATCH", "QUALITY_GATE_FAILED", "STRUCTURAL_FAILED",
                 "TARGET_MISSED", "REGRESSION"}


def compose_verdicts(*verdicts: TrackVerdict) -> TrackVerdict:
    """Refuse, always: percentage gains of separate screens are never added or multiplied; a
    combination of candidates is judged only by its own direct A/B (campaign #297: "Do not add
    speedups from separate experiments").

    Raises :class:`CompositionRefused` naming the screens given.
    """
    names = ", ".join(f"{v.candidate or 'control only'}@{v.track}" for v in verdicts) or "nothing"
    raise CompositionRefused(
        f"refusing to compose verdicts ({names}): run the combined candidate as its own direct "
        "A/B against control; gains of separate screens are never summed"
    )


# ------------------------------------------------------------------------------ inputs


@dataclass
class ReceiptIn:
    """A receipt with the bundle path it came from (None for plain data)."""

    receipt: Receipt
    path: str | None = None
    text: str | None = None


@dataclass
class ReportIn:
    """A media report with its bundle path (None for plain data)."""

    report: MediaReport
    path: str | None = None
    text: str | None = None


@dataclass
class StatusIn:
    """A status snapshot with its bundle path and raw text (for line numbers)."""

    status: StatusSnapshot
    path: str = "results/status.json"
    text: str | None = None


@dataclass
class Evidence:
    """What the engine reads: the scope, receipts, media reports and status snapshots.
    ``unverified`` holds bundle paths whose manifest entry did not verify (their sessions do
    not qualify); ``root`` is the campaign directory when read from disk.
    Build it with :meth:`from_lists` (tests, plain data) or :meth:`from_loaded`."""

    scope: CampaignScope
    receipts: list[ReceiptIn] = field(default_factory=list)
    reports: list[ReportIn] = field(default_factory=list)
    unverified: set[str] = field(default_factory=set)
    statuses: list[StatusIn] = field(default_factory=list)
    scope_path: str = "campaign.toml"
    scope_text: str | None = None
    root: Path | None = None
    unreadable: list[tuple[str, str | None, str | None, str | None]] = field(
        default_factory=list)
    """(path, screen id, track, candidate; each None when unknown) of receipt files that
    could not be read or validated: a verdict never silently drops them."""

    @classmethod
    def from_lists(
        cls,
        scope: CampaignScope,
        receipts: Iterable[Receipt | ReceiptIn],
        reports: Iterable[MediaReport | ReportIn] = (),
        unverified: Iterable[str] = (),
        statuses: Iterable[StatusSnapshot | StatusIn] = (),
    ) -> Evidence:
        """From plain models (path None) or already wrapped ones."""
        rs = [r if isinstance(r, ReceiptIn) else ReceiptIn(r) for r in receipts]
        ms = [m if isinstance(m, ReportIn) else ReportIn(m) for m in reports]
        ss = [x if isinstance(x, StatusIn) else StatusIn(x) for x in statuses]
        return cls(scope, rs, ms, set(unverified), ss)

    @classmethod
    def from_loaded(cls, loaded: LoadedCampaign, unverified: Iterable[str] = ()) -> Evidence:
        """From a loaded campaign directory.  Raises ValueError when it has no valid scope."""
        if loaded.scope is None:
            raise ValueError("the campaign has no valid campaign.toml; no verdict can be given")
        bad: list[tuple[str, str | None, str | None, str | None]] = []
        for f in loaded.findings:
            if f.rule not in UNREADABLE_RULES or not f.path.endswith(".json"):
                continue
            obj = loaded.json_docs.get(f.path, (None, ""))[0]
            schema = obj.get("schema") if isinstance(obj, dict) else None
            if isinstance(schema, str) and not schema.startswith("campaign-bot/receipt"):
                continue  # a status or media report: not a session
            def _s(key: str, o: object = obj) -> str | None:
                v = o.get(key) if isinstance(o, dict) else None
                return v if isinstance(v, str) else None

            bad.append((f.path, _s("screen_id"), _s("track"), _s("candidate")))
        ev = cls(
            loaded.scope.model,
            [ReceiptIn(d.model, d.path, d.text) for d in loaded.receipts],
            [ReportIn(d.model, d.path, d.text) for d in loaded.media_reports],
            set(unverified),
            [StatusIn(d.model, d.path, d.text) for d in loaded.statuses],
            loaded.scope.path,
            loaded.scope.text,
            Path(loaded.root),
        )
        ev.unreadable = sorted(set(bad), key=lambda x: x[0])
        return ev


# ----------------------------------------------------------------------- session helpers


def session_median(r: Receipt) -> float | None:
    """Median of the measured client wall seconds; None when there is no measured request, or
    any measured request failed or lacks a finite, positive time (a failed measurement is
    never dropped to make a median)."""
    vals = []
    for q in r.measured:
        v = q.client_wall_s
        if not q.ok or v is None or not math.isfinite(v) or v <= 0:
            return None
        vals.append(v)
    return statistics.median(vals) if vals else None


def lifecycle_issues(lc: Lifecycle) -> list[tuple[str, str]]:
    """(field path, problem) pairs for an unclean lifecycle, mirroring
    :meth:`Lifecycle.problems` but naming the field (for findings' line numbers)."""
    out: list[tuple[str, str]] = []
    if not lc.workers:
        out.append(("lifecycle.workers", "no worker exits recorded"))
    for i, w in enumerate(lc.workers):
        if not w.clean:
            fld = "exit_code" if w.state == "exited" and w.signal is None else (
                "signal" if w.signal is not None else "state")
            out.append((f"lifecycle.workers.{i}.{fld}", f"{w.who()} {w.describe()}"))
    if lc.terminate_actions:
        out.append(("lifecycle.terminate_actions", f"{lc.terminate_actions} terminate action(s)"))
    if lc.kill_actions:
        out.append(("lifecycle.kill_actions", f"{lc.kill_actions} kill action(s)"))
    if lc.server_exit_code != 0 or lc.server_signal is not None:
        fld = "server_signal" if lc.server_signal is not None else "server_exit_code"
        out.append((f"lifecycle.{fld}", lc.server_problem()))
    if lc.container_exit_code not in (None, 0):
        out.append(("lifecycle.container_exit_code", f"container exit {lc.container_exit_code}"))
    for label, chk in (("before", lc.devices_idle_before), ("after", lc.devices_idle_after)):
        if chk is None or not chk.idle:
            out.append((f"lifecycle.devices_idle_{label}", f"devices not shown idle {label}"))
    if lc.interrupted:
        out.append(("lifecycle.interrupted", "session interrupted"))
    return out


def hard_lifecycle_issues(lc: Lifecycle) -> list[tuple[str, str]]:
    """:func:`lifecycle_issues` without the merely missing device idle checks (a check that
    was never recorded is ambiguous evidence; a check that found busy devices is a failure)."""
    return [(f, t) for f, t in lifecycle_issues(lc)
            if not (f.startswith("lifecycle.devices_idle_") and getattr(
                lc, f.split(".")[1]) is None)]


def request_issues(r: Receipt) -> list[tuple[str, str]]:
    """(field path, problem) for every failed request and every measured request without a
    finite client wall time."""
    out: list[tuple[str, str]] = []
    for i, q in enumerate(r.requests):
        if q.http_status != 200:
            got = ("got no HTTP response" if q.http_status is None
                   else f"returned HTTP {q.http_status}")
            out.append((f"requests.{i}.http_status",
                        f"{q.kind} request {q.index} {got}"
                        + (f" ({q.error})" if q.error else "")))
        elif q.error is not None:
            out.append((f"requests.{i}.error", f"{q.kind} request {q.index} error: {q.error}"))
        elif q.kind == "measured":
            v = q.client_wall_s
            if v is None or not math.isfinite(v) or v <= 0:
                got = "none recorded" if v is None else f"{v:g} s"
                out.append((f"requests.{i}.client_wall_s",
                            f"measured request {q.index} has no finite, positive client wall "
                            f"time ({got})"))
    return out


def scope_input_digests(scope: CampaignScope) -> dict[str, str]:
    """The scope's pinned input digests under the names receipts use."""
    inp = scope.inputs
    out = {
        "reference_video": inp.reference_video.sha256,
        "reference_audio": inp.reference_audio.sha256,
    }
    prompt = inp.prompt_sha256 or (inp.prompt_file.sha256 if inp.prompt_file else None)
    if prompt:
        out["prompt"] = prompt
    return out


def revision_matches(a: str, b: str) -> bool:
    """Two commit ids match when one is a prefix of the other (at least 7 hex digits)."""
    a, b = a.lower(), b.lower()
    return min(len(a), len(b)) >= 7 and (a.startswith(b) or b.startswith(a))


def warmup_issue(r: Receipt, required: int) -> str | None:
    """Why a session's warmup does not satisfy the protocol, or None."""
    need = max(1, required)
    ordered = sorted(r.requests, key=lambda q: q.index)
    first_measured = next((q.index for q in ordered if q.kind == "measured"), None)
    before = [q for q in ordered if q.kind == "warmup"
              and (first_measured is None or q.index < first_measured)]
    if len(before) < need:
        return (f"session {r.session_id} has {len(before)} warmup(s) before its first measured "
                f"request; the protocol asks for {need}")
    return None


def mean_slot_gap(receipts: Sequence[Receipt]) -> float | None:
    """|mean control slot - mean candidate slot| of one screen; None without both arms."""
    a = [r.slot for r in receipts if r.arm == "control"]
    b = [r.slot for r in receipts if r.arm == "candidate"]
    if not a or not b:
        return None
    return abs(sum(a) / len(a) - sum(b) / len(b))


# -------------------------------------------------------------------------- quality


@dataclass
class QualityOutcome:
    """Result of the quality gate: ``failed`` / ``unproven`` reasons (empty when passed)."""

    failed: list[Reason] = field(default_factory=list)
    unproven: list[Reason] = field(default_factory=list)


def _outputs(rs: Iterable[Receipt]) -> dict[str, str]:
    """sha256 -> session id for measured outputs."""
    out: dict[str, str] = {}
    for r in rs:
        for q in r.measured:
            if q.output_sha256:
                out.setdefault(q.output_sha256, r.session_id)
    return out


def control_repeatability(
    controls: Sequence[Receipt], reports: Sequence[MediaReport]
) -> tuple[Literal["established", "differs", "unproven"], str]:
    """Whether two control sessions gave equal decoded output.

    ``differs`` when a lossless media report between outputs of two different control sessions
    shows unequal frames or PCM (this wins over any equal pair); ``established`` when two
    sessions' outputs have equal SHA-256 or a report shows their frames and PCM equal (PCM not
    compared does not establish it: lossless means frames and PCM); else ``unproven``.
    """
    by_sha: dict[str, set[str]] = defaultdict(set)
    for r in controls:
        for q in r.measured:
            if q.output_sha256:
                by_sha[q.output_sha256].add(r.session_id)
    established = ""
    for sha, sess in by_sha.items():
        if len(sess) >= 2:
            established = f"control sessions {', '.join(sorted(sess))} have equal output {sha[:12]}"
    for rep in reports:
        be = rep.bit_exact
        a, b = by_sha.get(rep.control.sha256), by_sha.get(rep.candidate.sha256)
        if be is None or not a or not b or (a == b and len(a) == 1):
            continue
        if not be.frames_equal or be.pcm_equal is False:
            what = "decoded frames" if not be.frames_equal else "decoded PCM"
            return "differs", (
                f"control outputs {rep.control.sha256[:12]} and {rep.candidate.sha256[:12]} "
                f"differ in {what}: control is not repeatable")
        if be.pcm_equal is True:  # frames and PCM both shown equal
            established = established or (
                f"control outputs {rep.control.sha256[:12]} and {rep.candidate.sha256[:12]} "
                "are bit-exact")
    if established:
        return "established", established
    return "unproven", "no two control sessions are shown to give equal decoded output"


def _metric_value(rep: MediaReport, names: tuple[str, ...]) -> tuple[str, float | None] | None:
    for name in names:
        for mt in rep.metrics:
            if mt.name == name:
                return name, mt.value
    return None


def judge_quality(
    track: Track,
    scope: CampaignScope,
    candidates: Sequence[Receipt],
    controls: Sequence[Receipt],
    reports: Sequence[MediaReport],
) -> QualityOutcome:
    """The quality gate for one candidate on one track (see module docstring).

    ``controls`` is the control pool (same track, same control config) used for equality and
    repeatability; ``reports`` all media reports available.
    """
    q = QualityOutcome()
    cand_out = _outputs(candidates)
    ctrl_out = _outputs(controls)
    missing = [f"{r.session_id} request {x.index}" for r in candidates for x in r.measured
               if x.ok and not x.output_sha256]
    if missing:
        q.unproven.append(Reason(
            code="QUALITY_UNPROVEN", gate="quality",
            text=f"candidate output without SHA-256: {', '.join(missing)}"))
    # structural failures concern every mode
    for rep in reports:
        if rep.candidate.sha256 in cand_out and rep.control.sha256 in ctrl_out:
            bad = [c for c in rep.structural if not c.passed]
            if bad:
                q.failed.append(Reason(
                    code="STRUCTURAL_FAILED", gate="quality",
                    text=f"candidate output {rep.candidate.sha256[:12]} fails structural "
                    f"check(s) {', '.join(c.name for c in bad)} ({rep.validator_version})"))
    if track.quality_mode == "lossless":
        _judge_lossless(q, cand_out, ctrl_out, controls, reports)
    else:
        _judge_lossy(q, scope, cand_out, ctrl_out, reports)
    return q


def _judge_lossless(q: QualityOutcome, cand_out: dict[str, str], ctrl_out: dict[str, str],
                    controls: Sequence[Receipt], reports: Sequence[MediaReport]) -> None:
    rep_state, rep_text = control_repeatability(controls, reports)
    differing: list[str] = []
    unproven: list[str] = []
    for sha, sess in cand_out.items():
        if sha in ctrl_out:
            continue  # byte-identical MP4: identical decoded output
        seen: list[bool | None] = []  # True equal, False differs, None PCM not compared
        for rep in reports:
            if rep.bit_exact is None:
                continue
            pair = {rep.control.sha256, rep.candidate.sha256}
            if sha in pair and (pair - {sha}) & ctrl_out.keys():
                be = rep.bit_exact
                seen.append(False if not be.frames_equal or be.pcm_equal is False
                            else be.pcm_equal)
        if False in seen:
            differing.append(f"{sess} ({sha[:12]})")
        elif True not in seen:
            unproven.append(f"{sess} ({sha[:12]})"
                            + (": decoded PCM not compared" if seen else ""))
    if rep_state == "differs":
        q.unproven.append(Reason(
            code="LOSSLESS_CONTROL_NOT_REPEATABLE", gate="quality",
            text=f"{rep_text}; lossless stays INCONCLUSIVE even if perceptual gates pass"))
    elif differing and rep_state == "established":
        q.failed.append(Reason(
            code="LOSSLESS_MISMATCH", gate="quality",
            text=f"candidate output not bit-exact with control: {', '.join(differing)}"))
    elif differing:
        q.unproven.append(Reason(
            code="LOSSLESS_UNPROVEN", gate="quality",
            text=f"candidate output differs from control ({', '.join(differing)}) but control "
            f"repeatability is not established ({rep_text})"))
    if rep_state == "unproven":
        q.unproven.append(Reason(code="LOSSLESS_UNPROVEN", gate="quality",
                                 text=f"control repeatability not established: {rep_text}"))
    if unproven:
        q.unproven.append(Reason(
            code="LOSSLESS_UNPROVEN", gate="quality",
            text=f"no bit-exact evidence for candidate output(s) {', '.join(unproven)}"))
    if not cand_out and not q.unproven:
        q.unproven.append(Reason(code="LOSSLESS_UNPROVEN", gate="quality",
                                 text="no candidate output digests to compare"))


def _judge_lossy(q: QualityOutcome, scope: CampaignScope, cand_out: dict[str, str],
                 ctrl_out: dict[str, str], reports: Sequence[MediaReport]) -> None:
    gates = scope.quality_gates
    uncovered = []
    for sha, sess in cand_out.items():
        if sha in ctrl_out or any(
                r.bit_exact is not None and r.bit_exact.frames_equal
                and r.bit_exact.pcm_equal is True and r.candidate.sha256 == sha
                and r.control.sha256 in ctrl_out for r in reports):
            continue  # identical to control: every perceptual gate holds trivially
        reps = [r for r in reports if r.candidate.sha256 == sha and r.control.sha256 in ctrl_out
                and r.mode == "lossy"]
        if not reps:
            uncovered.append(f"{sess} ({sha[:12]})")
            continue
        for rep in reps:
            where = f"output {sha[:12]} ({rep.validator_version})"
            for gate_name, names in PERCEPTUAL_GATES.items():
                found = _metric_value(rep, names)
                if found is None:
                    q.unproven.append(Reason(
                        code="QUALITY_UNPROVEN", gate="quality",
                        text=f"{where}: no metric for scope gate {gate_name}"))
                    continue
                name, value = found
                if value is None or math.isnan(value):
                    what = "has no value" if value is None else "is NaN (not a number)"
                    q.unproven.append(Reason(
                        code="QUALITY_UNPROVEN", gate="quality",
                        text=f"{where}: {name} {what}"))
                    continue
                if gate_name == "audio_rms_ratio":
                    g = gates.audio_rms_ratio
                    ok = g.low <= value <= g.high
                    rule = f"in [{g.low}, {g.high}] ({g.source})"
                else:
                    g1 = getattr(gates, gate_name)
                    ok = value <= g1.threshold if gate_name.endswith("_max") else (
                        value >= g1.threshold)
                    op = "<=" if gate_name.endswith("_max") else ">="
                    rule = f"{op} {g1.threshold} ({g1.source})"
                if not ok:
                    q.failed.append(Reason(
                        code="QUALITY_GATE_FAILED", gate="quality",
                        text=f"{where}: {name} {value:g} fails scope gate {rule}"))
            if not rep.passed and not any(r.code == "QUALITY_GATE_FAILED" for r in q.failed):
                q.failed.append(Reason(
                    code="QUALITY_GATE_FAILED", gate="quality",
                    text=f"{where}: media report failed: {'; '.join(rep.reasons) or 'no reason'}"))
    if uncovered:
        q.unproven.append(Reason(
            code="QUALITY_UNPROVEN", gate="quality",
            text=f"no lossy media report against control for {', '.join(uncovered)}"))
    if not cand_out and not q.unproven:
        q.unproven.append(Reason(code="QUALITY_UNPROVEN", gate="quality",
                                 text="no candidate output digests to judge"))


# -------------------------------------------------------------------------- decision


@dataclass
class Decision:
    """Outcome of the exact rule on session medians (see :mod:`evidence.stats`)."""

    verdict: VerdictValue
    reasons: list[Reason]
    ratio: float
    lower: float | None
    upper: float | None
    confidence: float | None
    two_sided_confidence: float | None
    u: int | None
    pairs: int
    above: int
    below: int
    spread: float
    best_confidence: float
    more_pairs_needed: int | None
    regression: bool


SPREAD_RATIO = 1.5
"""Candidate/control ratio of the standard deviations of log session medians above which the
rank rule alone is not trusted (see :func:`unequal_spread`)."""


@dataclass(frozen=True)
class SpreadCheck:
    """:func:`unequal_spread`'s result: ``ratio`` of the arms' standard deviations of log
    session medians (candidate / control; inf when control's is 0), ``p`` Welch's one-sided
    p-value in the direction asked, ``agrees`` whether it is at most alpha."""

    ratio: float
    p: float
    agrees: bool


def unequal_spread(control: Sequence[float], candidate: Sequence[float], theta0: float,
                   direction: Literal["less", "greater"], alpha: float = stats.ALPHA,
                   ) -> SpreadCheck | None:
    """The guard of the decision against a noisier candidate, or None when it does not apply.

    The Mann-Whitney rule is exact when both arms' log session medians have the same shape
    under the null; a candidate noisier than control (the Behrens-Fisher problem) inflates
    its false SUPPORTED rate: 7.3 % at 3 and 6.6 % at 6 sessions per arm with a candidate 3x
    as noisy, 5.1 % and 4.6 % with this guard (``benchmarks/verdict_error_rates.py``,
    docs/verdict-statistics.md).
    So when both arms have at least 2 sessions and the candidate's sample standard deviation
    of log session medians exceeds :data:`SPREAD_RATIO` times control's, a SUPPORTED
    (``direction="less"``: log t - log theta0 below log c) or FAILED (``"greater"``) also
    needs Welch's unequal-variance t-test on the log session medians to reject at ``alpha``
    (Welch, *Biometrika* 34 (1947) 28-35, with Satterthwaite's degrees of freedom; computed
    by ``scipy.stats.ttest_ind(equal_var=False, alternative=direction)``).  The guard can
    only turn a decision into INCONCLUSIVE, never make one; measured cost: at most 3.5 points
    of power at a true 35 % reduction against a 30 % target, equal noise.
    """
    m, n = len(control), len(candidate)
    if m < 2 or n < 2:
        return None
    lc = [math.log(x) for x in control]
    lt = [math.log(x) - math.log(theta0) for x in candidate]
    sc, st = statistics.stdev(lc), statistics.stdev(lt)
    if st == 0 or st <= SPREAD_RATIO * sc:
        return None
    from scipy import stats as sps  # on first use only (see evidence.stats)

    p = float(sps.ttest_ind(lt, lc, equal_var=False, alternative=direction).pvalue)
    return SpreadCheck(st / sc if sc else math.inf, p, p <= alpha)


def decide(control: Sequence[float], candidate: Sequence[float], theta0: float,
           alpha: float = stats.ALPHA) -> Decision:
    """The exact distribution-free decision on pairwise ratios ``t_j / c_i``.

    ``control``/``candidate`` are session medians in seconds (finite, positive); ``theta0``
    is ``1 - target_reduction`` (above 1 for a no-regression track: ``1 + max_slowdown``).
    Raises ValueError for empty arms, non-finite values or ``theta0`` outside (0, 2).
    """
    m, n = len(control), len(candidate)
    if m < 1 or n < 1:
        raise ValueError(f"need at least one session per arm, got m={m}, n={n}")
    if not 0 < theta0 < 2:
        raise ValueError(f"theta0 must be in (0, 2), got {theta0}")
    ratios = stats.pairwise_ratios(control, candidate)
    hl = stats.hodges_lehmann(ratios)
    above = stats.count_at_or_above(ratios, theta0)
    below = stats.count_at_or_below(ratios, theta0)
    u = stats.exact_u(m, n, alpha)
    spread = max(control) / min(control)
    best = stats.best_confidence(m, n)
    k = m * n
    reasons: list[Reason] = []
    lower = upper = conf = conf2 = None
    regression = False
    toward = above if hl < theta0 else below
    more = stats.pairs_needed(m, n, toward / k, alpha)
    if u is None:
        verdict: VerdictValue = "INCONCLUSIVE"
        reasons.append(Reason(
            code="UNDERPOWERED", gate="decision",
            text=f"{m} vs {n} sessions can never reach one-sided alpha {alpha:.4g}: best possible "
            f"confidence {best:.1%}"
            + (f"; {more} more balanced pair(s) needed" if more is not None else "")))
    else:
        p_u = stats.null_cdf(m, n, u)
        lower, upper = ratios[u], ratios[k - 1 - u]
        conf, conf2 = 1 - p_u, 1 - 2 * p_u
        bounds = f"bounds [{lower:.4f}, {upper:.4f}] at {conf:.1%} each"
        if stats.u_method(m, n) != "exact":
            bounds += " (normal approximation: beyond the exact limit)"
        if above <= u:
            verdict = "SUPPORTED"
            reasons.append(Reason(
                code="TARGET_MET", gate="decision",
                text=f"{above} of {k} pairs at or above theta0 {theta0:g} (tolerated {u}); "
                f"ratio {hl:.4f}, {bounds}"))
        elif below <= u:
            verdict = "FAILED"
            reasons.append(Reason(
                code="TARGET_MISSED", gate="decision",
                text=f"{below} of {k} pairs at or below theta0 {theta0:g} (tolerated {u}); "
                f"ratio {hl:.4f}, {bounds}"))
            if lower > 1:
                regression = True
                reasons.append(Reason(
                    code="REGRESSION", gate="decision",
                    text=f"candidate slower than control: even the lower bound {lower:.4f} "
                    "is above 1"))
        else:
            verdict = "INCONCLUSIVE"
            reasons.append(Reason(
                code="OVERLAP", gate="decision",
                text=f"{above} pairs at/above and {below} at/below theta0 {theta0:g}, "
                f"{u} tolerated; ratio {hl:.4f}, {bounds}"
                + (f"; about {more} more balanced pair(s) needed if this held"
                   if more else "")))
        if verdict != "INCONCLUSIVE":
            guard = unequal_spread(control, candidate, theta0,
                                   "less" if verdict == "SUPPORTED" else "greater", alpha)
            if guard is not None and not guard.agrees:
                decided = next(r.text for r in reasons
                               if r.code in ("TARGET_MET", "TARGET_MISSED"))
                reasons = [Reason(
                    code="UNEQUAL_SPREAD", gate="decision",
                    text=f"the rank rule says {verdict}, but the candidate's session medians "
                    f"are {guard.ratio:.1f}x as spread as control's (over {SPREAD_RATIO:g}x) "
                    f"and Welch's test does not agree (one-sided p {guard.p:.3f} > "
                    f"{alpha:g}): a noisier candidate is not judged by ranks alone; "
                    f"ranks: {decided}")]
                verdict, regression = "INCONCLUSIVE", False
    return Decision(verdict, reasons, hl, lower, upper, conf, conf2, u, k, above, below,
                    spread, best, more, regression)


def prior_noise_decision(control: Sequence[float], candidate: Sequence[float], theta0: float,
                         diffs: Sequence[float], alpha: float = stats.ALPHA) -> PriorNoiseResult:
    """Model-based decision with noise from ``diffs`` (historical control-vs-control log
    differences of single sessions).  Session log-noise variance is ``mean(d**2) / 2``; the
    ratio of geometric means gets a Student-t interval with ``len(diffs)`` degrees of freedom.

    Raises ValueError with fewer than :data:`PRIOR_NOISE_MIN_DIFFS` finite differences.
    """
    d = [x for x in diffs if math.isfinite(x)]
    if len(d) < PRIOR_NOISE_MIN_DIFFS:
        raise ValueError(f"prior-noise mode needs at least {PRIOR_NOISE_MIN_DIFFS} finite "
                         f"historical control-vs-control differences, got {len(d)}")
    m, n = len(control), len(candidate)
    if m < 1 or n < 1:
        raise ValueError("need at least one session per arm")
    s2 = sum(x * x for x in d) / len(d) / 2
    est = (sum(math.log(t) for t in candidate) / n) - (sum(math.log(c) for c in control) / m)
    se = math.sqrt(s2 * (1 / m + 1 / n))
    from scipy import stats as sps

    tq = float(sps.t.ppf(1 - alpha, len(d)))
    lower, upper = math.exp(est - tq * se), math.exp(est + tq * se)
    dec: VerdictValue = ("SUPPORTED" if upper < theta0 else
                         "FAILED" if lower > theta0 else "INCONCLUSIVE")
    return PriorNoiseResult(diffs=len(d), ratio=math.exp(est), lower=lower, upper=upper,
                            confidence=1 - alpha, decision=dec)


def arm_tail(arm: Literal["control", "candidate"], receipts: Sequence[Receipt]) -> ArmTail:
    """p95 of one arm's measured requests, or ``underpowered`` below 59 requests."""
    vals = sorted(q.client_wall_s for r in receipts for q in r.measured
                  if q.ok and q.client_wall_s is not None and math.isfinite(q.client_wall_s))
    n = len(vals)
    idx = stats.p95_upper_bound_index(n) if n >= TAIL_MIN_REQUESTS else None
    if idx is None:
        return ArmTail(arm=arm, measured_requests=n, status="underpowered")
    return ArmTail(arm=arm, measured_requests=n, status="ok",
                   p95_s=vals[math.ceil(0.95 * n) - 1], p95_upper_bound_s=vals[idx])


# ---------------------------------------------------------------------------- engine


@dataclass
class _Group:
    track: str
    candidate: str | None
    screens: list[str] = field(default_factory=list)
    items: list[ReceiptIn] = field(default_factory=list)
    extra: list[Reason] = field(default_factory=list)


def _group(ev: Evidence) -> list[_Group]:
    by_screen: dict[str, list[ReceiptIn]] = defaultdict(list)
    for it in ev.receipts:
        by_screen[it.receipt.screen_id].append(it)
    # unreadable receipts still name their screen, track and candidate when the JSON parsed
    ghosts: dict[str, set[tuple[str, str | None]]] = defaultdict(set)
    for _path, sid, track, cand in ev.unreadable:
        if sid is not None and track is not None:
            ghosts[sid].add((track, cand))
    groups: dict[tuple[str, str | None], _Group] = {}
    for sid in sorted(set(by_screen) | set(ghosts)):
        items = by_screen.get(sid, [])
        tracks = sorted({i.receipt.track for i in items} | {t for t, _ in ghosts[sid]})
        cands = sorted({i.receipt.candidate for i in items
                        if i.receipt.arm == "candidate" and i.receipt.candidate}
                       | {c for _, c in ghosts[sid] if c})
        for tr in tracks:
            mine = [i for i in items if i.receipt.track == tr]
            slots: list[str | None] = [*cands] or [None]
            for cand in slots:
                g = groups.setdefault((tr, cand), _Group(tr, cand))
                g.screens.append(sid)
                g.items.extend(i for i in mine if i.receipt.arm == "control"
                               or i.receipt.candidate == cand)
                if len(tracks) > 1:
                    g.extra.append(Reason(
                        code="TRACK_MIXED", gate="validity",
                        text=f"screen {sid} mixes tracks {', '.join(tracks)}"))
                if len(cands) > 1:
                    g.extra.append(Reason(
                        code="CANDIDATE_MIXED", gate="validity",
                        text=f"screen {sid} mixes candidates {', '.join(cands)}"))
    # a control-only row only where the track has no candidate at all
    with_cand = {t for (t, c) in groups if c is not None}
    return [g for (t, c), g in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
            if c is not None or t not in with_cand]


def _validity(ev: Evidence, g: _Group) -> list[Reason]:
    scope = ev.scope
    out = list(g.extra)
    rs = [i.receipt for i in g.items]
    track_ids = {t.id for t in scope.tracks}

    def add(code: str, bad: list[str], what: str) -> None:
        if bad:
            out.append(Reason(code=code, gate="validity",
                              text=f"{what}: {', '.join(bad)}"))

    add("MANIFEST_UNVERIFIED", [i.path for i in g.items if i.path in ev.unverified],
        "receipt not verified by the manifest")
    add("RECEIPT_UNREADABLE", [p for p, sid, _t, _c in ev.unreadable
                               if sid is None or sid in g.screens],
        "receipt file that could not be read or validated (its session is not dropped "
        "silently)")
    add("CAMPAIGN_MISMATCH", [f"{r.session_id} ({r.campaign})" for r in rs
                              if r.campaign != scope.id], f"receipt not of campaign {scope.id}")
    if g.track not in track_ids:
        out.append(Reason(code="TRACK_UNKNOWN", gate="validity",
                          text=f"track {g.track!r} is not in the scope "
                          f"({', '.join(sorted(track_ids))})"))
    add("POOL_MISMATCH", [f"{r.session_id} ({r.pool})" for r in rs
                          if r.pool is not None and r.pool != scope.pool.name],
        f"session not on pool {scope.pool.name}")
    add("REQUEST_FAILED", [f"{r.session_id}: {t}" for r in rs for _, t in request_issues(r)],
        "request did not return HTTP 200 with timing")
    add("NO_MEASURED_REQUEST", [r.session_id for r in rs if not r.measured],
        "session without a measured request")
    add("LIFECYCLE_FAILED", [f"{r.session_id}: {'; '.join(r.lifecycle.problems())}"
                             for r in rs if r.lifecycle.problems()], "unclean lifecycle")
    add("ORDER_MISMATCH", [f"{r.session_id} slot {r.slot}" for r in rs if r.order and (
        r.slot >= len(r.order) or r.order[r.slot] != ("A" if r.arm == "control" else "B"))],
        "arm does not match its slot in the order")
    dup = defaultdict(list)
    for r in rs:
        dup[(r.screen_id, r.slot)].append(r.session_id)
    add("ORDER_MISMATCH", [f"{s} slot {k}: {', '.join(v)}" for (s, k), v in dup.items()
                           if len(v) > 1], "two sessions in one slot")
    ctrl = [r for r in rs if r.arm == "control"]
    cand = [r for r in rs if r.arm == "candidate"]
    add("REVISION_MISMATCH", [f"{r.session_id} ({r.engine_revision})" for r in ctrl
                              if not revision_matches(r.engine_revision, scope.engine.commit)],
        f"control revision is not the scope's {scope.engine.commit}")
    for arm, group in (("control", ctrl), ("candidate", cand)):
        digests = sorted({r.config_digest for r in group})
        if len(digests) > 1:
            out.append(Reason(code="CONFIG_MISMATCH", gate="validity",
                              text=f"{arm} sessions ran {len(digests)} configs: "
                              f"{', '.join(d[:12] for d in digests)}"))
    if g.candidate is not None:
        names = {c.name for c in scope.candidates}
        if g.candidate not in names:
            out.append(Reason(code="CANDIDATE_UNKNOWN", gate="validity",
                              text=f"candidate {g.candidate!r} is not declared in the scope"))
        same = [r.session_id for r in cand if any(
            r.config_digest == c.config_digest and revision_matches(
                r.engine_revision, c.engine_revision) for c in ctrl)]
        add("CANDIDATE_IS_CONTROL", same, "candidate session ran the control config and revision")
    pinned = scope_input_digests(scope)
    bad_inputs = []
    for r in rs:
        for name, sha in sorted(r.input_digests.items()):
            if name in pinned and pinned[name] != sha:
                bad_inputs.append(f"{r.session_id} {name} {sha[:12]} (scope {pinned[name][:12]})")
    seen: dict[str, set[str]] = defaultdict(set)
    for r in rs:
        for name, sha in r.input_digests.items():
            seen[name].add(sha)
    bad_inputs += [f"{name} has {len(v)} digests across sessions" for name, v in
                   sorted(seen.items()) if len(v) > 1 and name not in pinned]
    add("INPUTS_DIFFER", bad_inputs, "input digest differs")
    if not ctrl:
        out.append(Reason(code="NO_CONTROL", gate="validity", text="no control session"))
    if g.candidate is None:
        out.append(Reason(code="NO_CANDIDATE", gate="validity",
                          text="only control sessions on this track: nothing to judge"))
    return out


def _design(ev: Evidence, g: _Group) -> list[Reason]:
    p = ev.scope.protocol
    rs = [i.receipt for i in g.items]
    out: list[Reason] = []
    for arm in ("control", "candidate"):
        k = len({r.session_id for r in rs if r.arm == arm})
        if g.candidate is None and arm == "candidate":
            continue
        if k < p.min_measured_sessions_per_arm:
            out.append(Reason(code="TOO_FEW_SESSIONS", gate="design",
                              text=f"{k} {arm} session(s); the scope asks for at least "
                              f"{p.min_measured_sessions_per_arm} per arm"))
    for sid in g.screens:
        gap = mean_slot_gap([r for r in rs if r.screen_id == sid])
        if gap is not None and gap > 1 + 1e-9:
            out.append(Reason(code="UNBALANCED_ORDER", gate="design",
                              text=f"screen {sid}: mean slots of the arms differ by {gap:.2f} "
                              "(more than one slot)"))
    warm = [w for r in rs if (w := warmup_issue(r, p.warmups_per_session))]
    if warm:
        out.append(Reason(code="WARMUP_MISSING", gate="design", text="; ".join(warm)))
    short = [f"{r.session_id} ({len(r.measured)})" for r in rs
             if r.measured and len(r.measured) < p.measured_requests_per_session]
    if short:
        out.append(Reason(code="MEASURED_SHORT", gate="design",
                          text=f"fewer measured requests than the protocol's "
                          f"{p.measured_requests_per_session}: {', '.join(short)}"))
    return out


def _control_pool(ev: Evidence, track: str, ctrl: Sequence[Receipt]) -> list[Receipt]:
    digests = {r.config_digest for r in ctrl}
    return [i.receipt for i in ev.receipts if i.receipt.arm == "control"
            and i.receipt.track == track and i.receipt.config_digest in digests]


def historical_control_diffs(ev: Evidence, track: str, pool: str | None, config: str,
                             exclude_screens: Iterable[str] = ()) -> list[float]:
    """Control-vs-control log differences ``log(c_k+1 / c_k)`` of consecutive clean control
    sessions (by slot) within each other screen on the same track, pool and control config."""
    excl = set(exclude_screens)
    by_screen: dict[str, list[Receipt]] = defaultdict(list)
    for it in ev.receipts:
        r = it.receipt
        if (r.arm == "control" and r.track == track and r.config_digest == config
                and r.pool == pool and r.screen_id not in excl and r.lifecycle.clean
                and not request_issues(r)):
            by_screen[r.screen_id].append(r)
    diffs = []
    for rs in by_screen.values():
        meds = [m for r in sorted(rs, key=lambda x: x.slot) if (m := session_median(r))]
        diffs += [math.log(b / a) for a, b in zip(meds, meds[1:], strict=False)]
    return diffs


@dataclass
class _Series:
    """The group-sequential series of one (track, candidate): ``screens`` look 1 first;
    ``problems`` validity reasons when the follow-up marks do not make a series."""

    screens: list[str] = field(default_factory=list)
    problems: list[Reason] = field(default_factory=list)


def _screen_span(rs: Sequence[Receipt]) -> tuple[Any, Any]:
    return (min(r.started_at for r in rs), max(r.stopped_at or r.started_at for r in rs))


def follow_up_series(receipts: Sequence[Receipt], declared: bool) -> _Series:
    """The series of a (track, candidate)'s receipts: look 1 is its earliest screen whose
    receipts carry no ``look``; follow-ups are the screens whose receipts name it in
    ``continues``, with looks 2, 3, ... in order, each started after the previous look
    ended.  Anything else marked as a follow-up is a validity problem (``SERIES_BROKEN``),
    and so is any follow-up when the protocol declares no sequential design
    (``FOLLOWUP_UNDECLARED``: repeated looks need alpha spending declared before the first
    look)."""
    by_screen: dict[str, list[Receipt]] = defaultdict(list)
    for r in receipts:
        by_screen[r.screen_id].append(r)
    out = _Series()
    marks: dict[str, tuple[int, str]] = {}
    for sid, rs in by_screen.items():
        got = {(r.look, r.continues) for r in rs}
        if len(got) > 1:
            out.problems.append(Reason(code="SERIES_BROKEN", gate="validity", text=(
                f"screen {sid}: its receipts disagree on look/continues")))
        look, cont = sorted(got, key=lambda x: (x[0] or 0, x[1] or ""))[-1]
        if look is not None and cont is not None:
            marks[sid] = (look, cont)
    if marks and not declared:
        out.problems.append(Reason(code="FOLLOWUP_UNDECLARED", gate="validity", text=(
            f"follow-up screen(s) {', '.join(sorted(marks))} but the protocol declares no "
            "[protocol.sequential] design: repeated looks need alpha spending declared "
            "before the first look")))
    firsts = sorted((s for s in by_screen if s not in marks),
                    key=lambda s: (_screen_span(by_screen[s])[0], s))
    if not firsts:
        if marks:
            out.problems.append(Reason(code="SERIES_BROKEN", gate="validity", text=(
                "follow-up screen(s) without their first look: "
                + ", ".join(f"{s} continues {c}" for s, (_, c) in sorted(marks.items())))))
        return out
    out.screens = [firsts[0]]
    follow = sorted(((lk, s) for s, (lk, c) in marks.items() if c == firsts[0]))
    stray = sorted(s for s, (_, c) in marks.items() if c != firsts[0])
    if stray:
        out.problems.append(Reason(code="SERIES_BROKEN", gate="validity", text=(
            "follow-up screen(s) of a screen that is not this candidate's first look "
            f"{firsts[0]}: " + ", ".join(f"{s} continues {marks[s][1]}" for s in stray))))
    for want, (lk, sid) in enumerate(follow, start=2):
        prev = out.screens[-1]
        if lk != want:
            out.problems.append(Reason(code="SERIES_BROKEN", gate="validity", text=(
                f"screen {sid} says look {lk}, but it is look {want} of series {firsts[0]}")))
            break
        if _screen_span(by_screen[sid])[0] < _screen_span(by_screen[prev])[1]:
            out.problems.append(Reason(code="SERIES_BROKEN", gate="validity", text=(
                f"look {lk} ({sid}) started before look {lk - 1} ({prev}) ended")))
            break
        out.screens.append(sid)
    return out


def confirmation_state(receipts: Sequence[Receipt], theta0: float, alpha: float = stats.ALPHA,
                       series: Sequence[str] = (),
                       ) -> tuple[Literal["provisional", "confirmed", "not confirmed"], str]:
    """Campaign-level error control for a SUPPORTED verdict: ``(state, why)``.

    A campaign screens many candidates per track; at the target boundary each screen says
    SUPPORTED falsely about 5 % of the time, so among 12 candidates at least one would about
    40 % of the time (docs/verdict-statistics.md).  A SUPPORTED stands as **confirmed** only
    when two screens of the candidate say so on their own: the first screen whose own
    sessions decide SUPPORTED, and the candidate's **next** screen on the track (whatever it
    says: the rule fixes which screen confirms before it runs, so a failed confirmation
    cannot be retried away), which must start after the first one ended and run the same
    control config (the original control).  Two independent level-0.05 screens give a false
    confirmation at most 0.05^2 per candidate: family-wise 2.9 % [2.3, 3.7] with 12 candidates
    at the boundary and 3 sessions per arm, against 43 % without it
    (benchmarks/verdict_error_rates.py, docs/verdict-statistics.md).  Otherwise the
    SUPPORTED is **provisional** (no confirmation screen yet, or only the pooled sessions
    decide) or **not confirmed** (the confirmation screen did not say SUPPORTED).
    ``receipts``: the verdict's sessions (both arms, every screen).  ``series``: under a
    group-sequential design, the screens of the series whose last look said SUPPORTED
    (:mod:`evidence.sequential`); the series stands for the first screen, and the
    confirmation screen is the next screen after its last look (a confirmation is one
    fixed-design screen at ``alpha``, never itself continued).
    """
    by_screen: dict[str, list[Receipt]] = defaultdict(list)
    for r in receipts:
        by_screen[r.screen_id].append(r)

    def own(sid: str) -> tuple[str, str | None]:
        rs = by_screen[sid]
        c = [m for r in rs if r.arm == "control" and (m := session_median(r)) is not None]
        t = [m for r in rs if r.arm == "candidate" and (m := session_median(r)) is not None]
        cfg = next((r.config_digest for r in rs if r.arm == "control"), None)
        return (decide(c, t, theta0, alpha).verdict if c and t else "INCONCLUSIVE"), cfg

    def span(sid: str) -> tuple[Any, Any]:
        rs = by_screen[sid]
        return (min(r.started_at for r in rs),
                max(r.stopped_at or r.started_at for r in rs))

    order = sorted(by_screen, key=lambda s: (span(s)[0], s))
    if series:
        done = set(series)
        cfg = own(series[0])[1]
        end = max(span(s)[1] for s in series)
        later = [s for s in order if s not in done and span(s)[0] >= end and own(s)[1] == cfg]
        name = f"series {' + '.join(series)}" if len(series) > 1 else f"screen {series[0]}"
        if not later:
            return "provisional", (f"{name} says SUPPORTED; the candidate's next screen on "
                                   "this track against the original control confirms it "
                                   "or not")
        verdict = own(later[0])[0]
        if verdict == "SUPPORTED":
            return "confirmed", f"{name} says SUPPORTED, and confirmation screen {later[0]} too"
        return "not confirmed", (f"{name} said SUPPORTED, but confirmation screen "
                                 f"{later[0]} says {verdict}")
    first = next((s for s in order if own(s)[0] == "SUPPORTED"), None)
    if first is None:
        return "provisional", ("no screen says SUPPORTED on its own sessions (only the pooled "
                               "screens do): a confirmation screen against the original "
                               "control is still needed")
    cfg, end = own(first)[1], span(first)[1]
    later = [s for s in order if s != first and span(s)[0] >= end and own(s)[1] == cfg]
    if not later:
        return "provisional", (f"screen {first} says SUPPORTED; the candidate's next screen "
                               "on this track against the original control confirms it or "
                               "not")
    nxt = later[0]
    if own(nxt)[0] == "SUPPORTED":
        return "confirmed", f"screen {first} says SUPPORTED, and confirmation screen {nxt} too"
    return "not confirmed", (f"screen {first} said SUPPORTED, but confirmation screen {nxt} "
                             f"says {own(nxt)[0]}")


def judge(ev: Evidence, *, prior_noise: bool = False,
          alpha: float = stats.ALPHA) -> list[TrackVerdict]:
    """Verdicts for every (track, candidate) of the campaign, plus one ``NO_SESSIONS`` row per
    scope track without receipts.  Never raises on odd evidence: problems become reasons."""
    scope = ev.scope
    tracks = {t.id: t for t in scope.tracks}
    reports = [r.report for r in ev.reports]
    report_paths = {r.path for r in ev.reports if r.path}
    out: list[TrackVerdict] = []
    groups = _group(ev)
    for g in groups:
        track = tracks.get(g.track)
        rs = [i.receipt for i in g.items]
        ctrl = [r for r in rs if r.arm == "control"]
        cand = [r for r in rs if r.arm == "candidate"]
        validity = _validity(ev, g)
        quality_failed: list[Reason] = []
        quality_unproven: list[Reason] = []
        if track is not None and g.candidate is not None:
            missing = sorted({p for i in g.items for p in i.receipt.media_reports
                              if i.path is not None and not _has_report(p, report_paths)})
            if missing:
                quality_unproven.append(Reason(
                    code="MEDIA_REPORT_MISSING", gate="quality",
                    text=f"referenced media report(s) not in the bundle: {', '.join(missing)}"))
            qo = judge_quality(track, scope, cand, _control_pool(ev, g.track, ctrl), reports)
            quality_failed += qo.failed
            quality_unproven += qo.unproven
        design = _design(ev, g)
        sessions = [SessionSummary(
            session_id=i.receipt.session_id, screen_id=i.receipt.screen_id, arm=i.receipt.arm,
            slot=i.receipt.slot, path=i.path, median_s=session_median(i.receipt),
            measured=len(i.receipt.measured), warmups=len(i.receipt.warmups))
            for i in sorted(g.items, key=lambda i: (i.receipt.screen_id, i.receipt.slot))]
        seq = scope.protocol.sequential
        ser = follow_up_series(rs, seq is not None)
        validity += ser.problems
        sequential_on = seq is not None and g.candidate is not None and bool(ser.screens)
        if sequential_on:  # the decision is the series' (later screens confirm)
            sessions_used = [x for x in sessions if x.screen_id in set(ser.screens)]
        else:
            sessions_used = sessions
        c_med = [s.median_s for s in sessions_used if s.arm == "control" and s.median_s]
        t_med = [s.median_s for s in sessions_used if s.arm == "candidate" and s.median_s]
        looks: list[sequential.Look] = []
        sizes: list[tuple[int, int]] = []
        if sequential_on and seq is not None:
            for k in range(1, len(ser.screens) + 1):
                upto = set(ser.screens[:k])
                sizes.append((sum(1 for x in sessions if x.screen_id in upto and x.median_s
                                  and x.arm == "control"),
                              sum(1 for x in sessions if x.screen_id in upto and x.median_s
                                  and x.arm == "candidate")))
            try:
                looks = sequential.plan_looks(seq, sizes, alpha)
            except ValueError as exc:
                validity.append(Reason(code="SERIES_BROKEN", gate="validity",
                                       text=f"series {ser.screens[0]}: {exc}"))
        look_alpha = looks[-1].level if looks else alpha
        v = TrackVerdict(track=g.track, candidate=g.candidate, screens=sorted(set(g.screens)),
                         verdict="INCONCLUSIVE", sessions=sessions,
                         control_medians_s=c_med, candidate_medians_s=t_med,
                         m=len(c_med), n=len(t_med))
        if track is not None:
            v.target_reduction = track.target_reduction
            v.theta0 = 1 - track.target_reduction
        if len(c_med) >= 2:  # a spread needs two control sessions
            v.control_spread = max(c_med) / min(c_med)
        v.tail = [arm_tail("control", ctrl)] + ([arm_tail("candidate", cand)] if cand else [])
        if looks and seq is not None:
            v.series = list(ser.screens)
            v.looks = [LookSummary(look=lk.number, screen_id=sid, m=lk.m, n=lk.n,
                                   fraction=lk.fraction, level=lk.level, u=lk.u,
                                   spent=lk.spent_after)
                       for lk, sid in zip(looks, ser.screens, strict=True)]
            v.alpha_level, v.alpha_spent = looks[-1].level, looks[-1].spent_after
        dec = None
        if c_med and t_med and v.theta0 is not None:
            dec = decide(c_med, t_med, v.theta0, look_alpha)
            if looks and seq is not None:
                last = looks[-1]
                dec.reasons.append(Reason(
                    code="SEQUENTIAL_LOOK", gate="decision",
                    text=f"look {last.number} of at most {seq.looks} ({seq.spending} "
                    f"spending, Lan-DeMets): information {last.fraction:.2f} of "
                    f"{seq.max_sessions_per_arm} sessions per arm, alpha share "
                    f"{last.level:.4f}, exact alpha spent {last.spent_after:.4f} of {alpha:g}"))
            v.ratio, v.lower, v.upper = dec.ratio, dec.lower, dec.upper
            v.confidence, v.two_sided_confidence, v.u = (dec.confidence,
                                                         dec.two_sided_confidence, dec.u)
            v.u_method = stats.u_method(v.m, v.n)  # type: ignore[assignment]
            v.pairs, v.pairs_at_or_above_theta0 = dec.pairs, dec.above
            v.pairs_at_or_below_theta0 = dec.below
            v.best_confidence, v.more_pairs_needed = dec.best_confidence, dec.more_pairs_needed
            if prior_noise and ctrl:
                diffs = historical_control_diffs(ev, g.track, ctrl[0].pool,
                                                 ctrl[0].config_digest, g.screens)
                if len(diffs) >= PRIOR_NOISE_MIN_DIFFS:
                    v.prior_noise = prior_noise_decision(c_med, t_med, v.theta0, diffs, alpha)
        v.reasons = validity + quality_failed + quality_unproven + design
        if dec is not None:
            v.reasons += dec.reasons
        elif g.candidate is not None and not validity:
            v.reasons.append(Reason(code="NO_MEDIANS", gate="validity",
                                    text="no session median on one arm"))
        if validity or (dec is None):
            v.verdict = "INCONCLUSIVE"
        elif quality_failed:
            v.verdict = "FAILED"
        elif quality_unproven or design:
            v.verdict = "INCONCLUSIVE"
        else:
            v.verdict = dec.verdict
        # REGRESSION flags a FAILED verdict whose valid evidence is significantly slower
        v.regression = bool(v.verdict == "FAILED" and dec is not None and dec.regression)
        if track is not None and track.kind == "no-regression" and g.candidate is not None:
            # non-inferiority: the same exact bound, read as "no slower than 1 + margin"
            v.verdict = "EQUIVALENT" if v.verdict == "SUPPORTED" else "NOT SHOWN"
        elif v.verdict == "SUPPORTED" and v.theta0 is not None:
            v.confirmation, v.confirmation_text = confirmation_state(
                rs, v.theta0, alpha, series=ser.screens if looks else ())
        if (looks and seq is not None and v.verdict == "INCONCLUSIVE" and dec is not None
                and dec.verdict == "INCONCLUSIVE" and v.theta0 is not None
                and not any(r.gate != "decision" for r in v.reasons)):
            v.followup = _followup(seq, sizes, c_med, t_med, v.theta0, alpha, ser.screens,
                                   [i.receipt for i in g.items], v.followup)
            if v.followup is not None:
                f = v.followup
                cost = ("" if f.device_hours is None
                        else f", about {f.device_hours:.2f} device-hours")
                v.reasons.append(Reason(
                    code="FOLLOW_UP", gate="decision",
                    text=f"{f.sessions_per_arm} more session(s) per arm (look {f.look}: a "
                    f"follow-up screen of {2 * f.sessions_per_arm} sessions{cost}) would "
                    f"decide with probability {f.probability:.0%} if the observed effect "
                    f"held (conditional power); `/screen continue` queues it"))
        if dec is not None and v.verdict != dec.verdict:
            # the decision gate was not reached: its outcome is not a reason (the statistics
            # stay in the fields); only UNDERPOWERED, a property of the design, is kept
            v.reasons = [r for r in v.reasons if r.gate != "decision" or r.code == "UNDERPOWERED"]
        out.append(v)
    covered = {g.track for g in groups}
    for t in scope.tracks:
        if t.id not in covered:
            out.append(TrackVerdict(
                track=t.id, candidate=None, verdict="INCONCLUSIVE",
                target_reduction=t.target_reduction, theta0=1 - t.target_reduction,
                reasons=[Reason(code="NO_SESSIONS", gate="validity",
                                text="no receipts for this track yet")]))
    order = {t.id: i for i, t in enumerate(scope.tracks)}
    out.sort(key=lambda v: (order.get(v.track, len(order)), v.track, v.candidate or ""))
    return out


def _followup(seq: SequentialDesign, sizes: list[tuple[int, int]], c_med: list[float],
              t_med: list[float], theta0: float, alpha: float, series: list[str],
              receipts: list[Receipt], default: FollowUp | None) -> FollowUp | None:
    """The projected follow-up of an INCONCLUSIVE look, priced at the series' mean session
    (wall seconds from start to stop, times its devices)."""
    proj = sequential.project_followup(seq, sizes, c_med, t_med, theta0, alpha)
    if proj is None:
        return default
    mine = [r for r in receipts if r.screen_id in set(series) and r.stopped_at is not None]
    per = sequential.session_device_seconds(
        [(r.stopped_at - r.started_at).total_seconds() for r in mine if r.stopped_at],
        [len(r.devices) for r in mine if r.stopped_at])
    return FollowUp(continues=series[0], look=proj.look, sessions_per_arm=proj.sessions_per_arm,
                    probability=proj.probability, level=proj.level,
                    device_hours=None if per is None else 2 * proj.sessions_per_arm * per / 3600)


def _has_report(ref: str, paths: set[str]) -> bool:
    ref = ref.lstrip("./")
    return any(p == ref or p.endswith("/" + ref) or ref.endswith("/" + p) for p in paths)


def judge_lists(scope: CampaignScope, receipts: Sequence[Receipt],
                reports: Sequence[MediaReport] = (), **kw: object) -> list[TrackVerdict]:
    """:func:`judge` on plain lists of models (no paths: no manifest or reference checks)."""
    return judge(Evidence.from_lists(scope, receipts, reports), **kw)  # type: ignore[arg-type]


def verdict_map(verdicts: Sequence[TrackVerdict]) -> Mapping[tuple[str, str | None], TrackVerdict]:
    """(track, candidate) -> verdict."""
    return {(v.track, v.candidate): v for v in verdicts}
