"""The dashboard's view model: the dataclasses every page, chart and JSON answer reads
(:class:`Site` and its parts), the severity and verdict orders they sort by, and
:func:`slug`, the page name of a screen, pool or track.  No computation lives here:
:mod:`bot.features.dashboard.model` builds these from a campaign directory.

Units: ``*_s`` seconds, ``*_h`` hours, times are timezone-aware UTC ``datetime``.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Literal

from evidence.check import CheckReport
from evidence.header import EvidenceSource, HeaderContent
from evidence.models import CampaignScope, Finding, Track
from evidence.screening import ScreeningDecision
from evidence.verdicts import Reason, TrackVerdict

SEVERITIES = ("P0", "P1", "P2", "P3")
SEVERITY_TEXT = MappingProxyType({"P0": "blocks", "P1": "wrong evidence",
                                  "P2": "ambiguous evidence", "P3": "note"})
"""Finding severities as the review defines them (:class:`evidence.models.Finding`)."""
VERDICT_RANK = MappingProxyType({"SUPPORTED": 0, "EQUIVALENT": 0, "INCONCLUSIVE": 1,
                                 "NOT SHOWN": 1, "FAILED": 2})
"""Best candidate on a track: SUPPORTED first, then INCONCLUSIVE, then FAILED; within a rank
the lowest ratio (the campaign status header ranks the same way)."""
EVIDENCE_DIR = "evidence"
"""Folder of the site that holds copies of the campaign's documents (receipts, status
snapshots, media reports, campaign.toml), at their campaign-relative paths."""


def slug(text: str) -> str:
    """A file-name-safe, case-insensitively unique page name for ``text`` (a screen id or a
    pool name, which are user data): lowercase ``[a-z0-9._-]``, at most 60 characters, then
    the first 8 hex digits of its SHA-256 (two ids never share a page, even on a
    case-insensitive file system)."""
    safe = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip(".-")[:60] or "x"
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


# ---------------------------------------------------------------------------- the model


@dataclass
class DocumentFile:
    """A campaign document copied into the site: ``path`` relative to the campaign root,
    ``sha256`` of its bytes (64 hex digits), ``size`` in bytes; ``verified`` is False when
    a manifest entry for it did not match (a MANIFEST_MISMATCH or similar finding), True
    otherwise."""

    path: str
    sha256: str
    size: int
    verified: bool = True

    @property
    def site_path(self) -> str:
        """Where the copy lies in the site (POSIX, relative to the site root)."""
        return f"{EVIDENCE_DIR}/{self.path}"


@dataclass
class RequestView:
    """One request of a session: ``client_wall_s``/``server_inference_s`` in seconds (None
    when not recorded), ``ok`` when HTTP 200 without an error."""

    index: int
    kind: Literal["warmup", "measured"]
    http_status: int | None
    client_wall_s: float | None
    server_inference_s: float | None
    error: str | None
    ok: bool


@dataclass
class SessionView:
    """One server session (one receipt) as the screen page shows it."""

    session_id: str
    screen_id: str
    track: str
    arm: Literal["control", "candidate"]
    candidate: str | None
    slot: int
    pool: str
    config_digest: str
    started_at: datetime
    ready_at: datetime | None
    stopped_at: datetime | None
    warmups: list[RequestView]
    measured: list[RequestView]
    median_s: float | None
    """Median of the measured client wall seconds; None when any measured request failed."""
    lifecycle: list[str]
    """Problems of the lifecycle (:meth:`evidence.models.Lifecycle.problems`); empty: clean."""
    lifecycle_facts: list[str]
    """What the receipt records: workers' exits, actions, server/container exit, idle checks."""
    request_problems: list[str]
    qualifies: bool
    """Whether the session qualifies (:mod:`evidence.sessions`, the count every view
    shows)."""
    hours: float
    device_hours: float
    receipt: DocumentFile | None

    @property
    def arm_label(self) -> str:
        """``control`` or ``candidate NAME``."""
        return self.arm if self.arm == "control" else f"candidate {self.candidate}"

    @property
    def failed(self) -> bool:
        """True when a request failed or the lifecycle has a hard problem (the session does
        not qualify and is still charged)."""
        return bool(self.request_problems) or any(
            not p.startswith("devices not shown idle") for p in self.lifecycle)


@dataclass
class GateRow:
    """One row of a screen's quality-gate table: the scope's ``rule`` with its ``source``,
    what was ``observed`` for this screen's candidate output, and the ``outcome``."""

    gate: str
    rule: str
    source: str
    observed: str
    outcome: Literal["pass", "fail", "not shown"]


@dataclass
class ScreenView:
    """One screen (one ``screen_id``): its sessions in run (slot) order and what the engine
    said about them."""

    screen_id: str
    slug: str
    tracks: list[str]
    candidates: list[str]
    pool: str
    order: str | None
    sessions: list[SessionView]
    screening: list[ScreeningDecision]
    verdicts: list[TrackVerdict]
    """The engine's verdicts for this screen's (track, candidate); each spans every screen of
    that candidate on that track (``verdict.screens``)."""
    quality: list[GateRow]
    quality_reasons: list[Reason]
    findings: list[Finding]

    @property
    def started_at(self) -> datetime:
        """Start of the first session."""
        return min(s.started_at for s in self.sessions)

    @property
    def ended_at(self) -> datetime:
        """Stop of the last session (its start when no stop was recorded)."""
        return max(s.stopped_at or s.started_at for s in self.sessions)

    @property
    def m(self) -> int:
        """Control sessions."""
        return sum(s.arm == "control" for s in self.sessions)

    @property
    def n(self) -> int:
        """Candidate sessions."""
        return sum(s.arm == "candidate" for s in self.sessions)

    @property
    def hours(self) -> float:
        """Session hours of this screen (failures included)."""
        return sum(s.hours for s in self.sessions)

    @property
    def device_hours(self) -> float:
        """Device-hours of this screen (failures included)."""
        return sum(s.device_hours for s in self.sessions)


@dataclass
class TrackRow:
    """One row of the index: a track, its control baseline and its best candidate."""

    track: Track
    baseline_median_s: float | None
    """Median of the track's clean control session medians, seconds."""
    baseline_sessions: int
    best: TrackVerdict | None
    verdicts: list[TrackVerdict]
    screening: dict[str, int]
    """Screening decision -> how many screens of this track got it (never verdicts)."""

    @property
    def theta0(self) -> float:
        """``1 - target_reduction``: the candidate/control ratio the target asks for."""
        return 1 - self.track.target_reduction

    @property
    def slug(self) -> str:
        """Page name part of this track (``track-SLUG.html``)."""
        return slug(self.track.id)


@dataclass
class ControlPoint:
    """One control session's median on a pool, at its start time."""

    at: datetime
    median_s: float
    session_id: str
    screen_id: str
    track: str
    config_digest: str


@dataclass
class PoolScreen:
    """A screen that ran control sessions on a pool: how many, and their median."""

    screen_id: str
    slug: str
    track: str
    sessions: int
    median_s: float | None
    started_at: datetime


@dataclass
class PoolView:
    """A hardware pool: control session medians over time (drift) and the screens that
    used them.  ``device_model``/``device_count`` come from the scope when it names this
    pool, else None."""

    name: str
    slug: str
    device_model: str | None
    device_count: int | None
    points: list[ControlPoint]
    screens: list[PoolScreen]

    @property
    def tracks(self) -> list[str]:
        """Tracks with control points on this pool, in order of first appearance."""
        return list(dict.fromkeys(p.track for p in self.points))


@dataclass
class BudgetPoint:
    """Cumulative budget use after one event: directions (count), wall-hours and
    device-hours used, and the ceilings in force at ``at``."""

    at: datetime
    label: str
    directions: int
    wall_h: float
    device_h: float
    failed_device_h: float
    directions_allowed: float
    wall_allowed_h: float
    device_allowed_h: float


@dataclass
class BudgetLine:
    """One budget dimension: ``used``, ``reserved`` (None: not known without the bot's
    database) and ``allowed`` in ``unit`` (``h`` or empty for a count)."""

    name: str
    unit: str
    used: float
    reserved: float | None
    allowed: float
    failed: float | None = None
    """Part of ``used`` spent on sessions or screens that failed (charged all the same)."""

    @property
    def left(self) -> float:
        """``allowed - used - reserved``."""
        return self.allowed - self.used - (self.reserved or 0.0)


@dataclass
class LedgerEntry:
    """One row of the bot's ``budget_entries`` table (kind: extend, direction, charge)."""

    at: datetime
    kind: str
    directions: int
    wall_hours: float
    device_hours: float
    screen: int | None
    by: str
    reason: str


@dataclass
class LedgerScreen:
    """One row of the bot's ``screens`` table for this campaign (hours from seconds)."""

    id: int
    label: str
    candidate: str
    track: str
    state: str
    conclusion: str | None
    verdict: str | None
    requested_by: str
    requested_at: datetime
    completed_at: datetime | None
    estimate_wall_h: float
    estimate_device_h: float
    charged_device_h: float | None
    charged_wall_h: float | None
    run_url: str | None
    pr_number: int | None = None
    pool: str | None = None


@dataclass
class Ledger:
    """What the bot's database says about one campaign's budget (``--database``)."""

    url: str
    """The database URL with any password hidden."""
    repo: str | None
    entries: list[LedgerEntry]
    screens: list[LedgerScreen]


@dataclass
class BudgetView:
    """Budget used / reserved / allowed, and its history from receipts and the ledger."""

    lines: list[BudgetLine]
    from_receipts: list[BudgetPoint]
    from_ledger: list[BudgetPoint] | None
    ledger: Ledger | None


@dataclass
class Site:
    """Everything the static site (and, later, the live pages) shows for one campaign."""

    scope: CampaignScope
    root_name: str
    tracks: list[TrackRow]
    verdicts: list[TrackVerdict]
    screening: list[ScreeningDecision]
    screens: list[ScreenView]
    pools: list[PoolView]
    budget: BudgetView
    findings: list[Finding]
    documents: list[DocumentFile]
    check: CheckReport = field(repr=False)
    status: HeaderContent | None = None
    """The campaign status as the issue's status header states it (Current state, Decision
    needed, Next action: :func:`evidence.header.build_header`, the same sentences), from this
    evidence and budget; the queue is not known to the static site (the live pages state it
    from the bot's database)."""
    source_url: str | None = None
    """Base URL of the campaign directory in a repository browser (``.../blob/SHA/path``);
    findings link to ``{source_url}/{path}#L{line}``."""
    status_source: EvidenceSource | None = field(default=None, repr=False)
    """The evidence :attr:`status` is computed from, kept so that the live pages can state
    the status again with the bot's budget ledger and screen queue."""
    charts: dict[tuple[str, ...], object] = field(default_factory=dict, repr=False,
                                                  compare=False)
    """Charts already drawn for this evidence, by kind and subject (a pool's drift chart of
    one track is on the pool's page and on the track's: drawn once).  A copy of the site
    with another budget (:func:`dataclasses.replace`) shares it: no chart here shows the
    budget."""

    @property
    def findings_by_severity(self) -> dict[str, int]:
        """Severity -> number of findings, every severity present (zero when none)."""
        c = Counter(str(f.severity) for f in self.findings)
        return {s: c.get(s, 0) for s in SEVERITIES}

    @property
    def as_of(self) -> datetime | None:
        """Latest session stop (or start) in the evidence: the site shows the evidence up
        to this moment (no wall clock, so the same evidence renders the same site)."""
        return self._as_of

    def screen(self, screen_id: str) -> ScreenView:
        """The screen with ``screen_id``; raises KeyError naming it."""
        try:
            return self._screens[screen_id]
        except KeyError:
            raise KeyError(f"no screen {screen_id!r} in this campaign") from None

    def document(self, path: str) -> DocumentFile | None:
        """The copied document at campaign-relative ``path``, if any."""
        return self._docs.get(path)

    def __post_init__(self) -> None:
        self._docs = {d.path: d for d in self.documents}
        self._screens = {s.screen_id: s for s in self.screens}
        self._as_of = max((s.ended_at for s in self.screens), default=None)
