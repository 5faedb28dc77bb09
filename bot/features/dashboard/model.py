"""The dashboard's data, built: everything a page shows (:mod:`bot.features.dashboard.views`),
computed once from a campaign directory (and, optionally, the bot's budget ledger), with no
HTML in it.

:func:`build_site` runs the same evidence pipeline as ``campaign-bot check`` (loader, manifest
verifier, verdict engine, screening, review findings: :func:`evidence.check.check_campaign`)
and arranges its results per track, per screen, per hardware pool and over time.  Nothing
here computes a verdict: a verdict, its ratio, bounds and confidence are the engine's values;
screening decisions are kept apart from verdicts and labelled as such.

Units: ``*_s`` seconds, ``*_h`` hours, times are timezone-aware UTC ``datetime``.  The
session is the unit (the median of its measured requests' client wall seconds); warmups are
kept apart and never counted.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Literal, TypeVar

from bot.features.dashboard.views import (
    VERDICT_RANK,
    BudgetLine,
    BudgetPoint,
    BudgetView,
    ControlPoint,
    DocumentFile,
    GateRow,
    Ledger,
    PoolScreen,
    PoolView,
    RequestView,
    ScreenView,
    SessionView,
    Site,
    TrackRow,
    slug,
)
from evidence.bundle import LoadedCampaign, load_campaign
from evidence.check import CheckReport, check_campaign
from evidence.header import (
    BudgetLine as HeaderBudgetLine,
)
from evidence.header import (
    EvidenceRef,
    EvidenceSource,
    HeaderContent,
    QueueItem,
    build_header,
    latest_screen_decisions,
    session_hours,
    track_verdict_from,
)
from evidence.models import CampaignScope, DeviceCheck, Finding, MediaReport, Receipt, Track
from evidence.review import unverified_paths
from evidence.screening import ScreeningDecision
from evidence.sessions import SessionCounts, session_counts
from evidence.verdicts import (
    PERCEPTUAL_GATES,
    Evidence,
    Reason,
    TrackVerdict,
    control_repeatability,
    judge_quality,
    request_issues,
    session_median,
)

T = TypeVar("T")
Outcome = Literal["pass", "fail", "not shown"]
"""A quality gate's outcome in a :class:`GateRow`."""


# ------------------------------------------------------------------------------- building


class CampaignUnreadable(ValueError):
    """The campaign directory has no valid ``campaign.toml``: nothing to report on.  The
    message names the file, field and line of the first problems."""


def _document_files(lc: LoadedCampaign, bad: set[str]) -> list[DocumentFile]:
    paths = [d.path for d in lc.receipts] + [d.path for d in lc.statuses] + [
        d.path for d in lc.media_reports]
    if lc.scope is not None:
        paths.append(lc.scope.path)
    out = []
    for p in sorted(set(paths)):
        try:
            raw = (lc.root / p).read_bytes()
        except OSError:
            continue  # vanished since it was loaded: shown without a link, never a traceback
        out.append(DocumentFile(p, hashlib.sha256(raw).hexdigest(), len(raw),
                                verified=p not in bad))
    return out


def _lifecycle_facts(r: Receipt) -> list[str]:
    lc = r.lifecycle
    out = _worker_facts(r)
    if lc.terminate_actions or lc.kill_actions:
        out.append(f"{lc.terminate_actions} terminate, {lc.kill_actions} kill action(s)")
    out += [f"forced: {a}" for a in lc.forced_actions]
    out.append(f"server exit {lc.server_exit_code}"
               + (f", signal {lc.server_signal}" if lc.server_signal is not None else ""))
    if lc.container_exit_code is not None:
        out.append(f"container exit {lc.container_exit_code}")
    out += [f"devices idle {label}: " + _idle(chk)
            for label, chk in (("before", lc.devices_idle_before),
                               ("after", lc.devices_idle_after))]
    if lc.interrupted:
        out.append("interrupted")
    return out


def _worker_facts(r: Receipt) -> list[str]:
    """How the receipt's workers ended, counted per ending (``3 worker(s) exit 0``)."""
    codes = Counter((w.state, w.exit_code, w.signal) for w in r.lifecycle.workers)
    out = []
    for (state, code, sig), k in sorted(codes.items(), key=str):
        what = f"exit {code}" if state == "exited" and sig is None else (
            f"signal {sig}" if sig is not None else state)
        out.append(f"{k} worker(s) {what}")
    return out or ["no worker exits recorded"]


def _idle(chk: DeviceCheck | None) -> str:
    """A device idle check as a word: not checked, yes, or NO."""
    return "not checked" if chk is None else "yes" if chk.idle else "NO"


def _session(r: Receipt, doc: DocumentFile | None, scope: CampaignScope,
             counts: SessionCounts) -> SessionView:
    def req(q) -> RequestView:  # noqa: ANN001
        return RequestView(q.index, q.kind, q.http_status, q.client_wall_s,
                           q.server_inference_s, q.error, q.ok)

    ordered = sorted(r.requests, key=lambda q: q.index)
    hours = session_hours(r)
    return SessionView(
        session_id=r.session_id, screen_id=r.screen_id, track=r.track, arm=r.arm,
        candidate=r.candidate, slot=r.slot, pool=r.pool or scope.pool.name,
        config_digest=r.config_digest, started_at=r.started_at, ready_at=r.ready_at,
        stopped_at=r.stopped_at,
        warmups=[req(q) for q in ordered if q.kind == "warmup"],
        measured=[req(q) for q in ordered if q.kind == "measured"],
        median_s=session_median(r), lifecycle=r.lifecycle.problems(),
        lifecycle_facts=_lifecycle_facts(r),
        request_problems=[t for _, t in request_issues(r)],
        qualifies=counts.qualifies(r.screen_id, r.session_id),
        hours=hours, device_hours=hours * (len(r.devices) or scope.pool.device_count),
        receipt=doc)


def _outputs(rs: Sequence[Receipt]) -> set[str]:
    return {q.output_sha256 for r in rs for q in r.measured if q.output_sha256}


def _fmt(v: float | None) -> str:
    if v is None:
        return "none"
    if math.isinf(v):
        return "identical (infinite)"
    return f"{v:.4g}"


def quality_rows(track: Track, scope: CampaignScope, candidates: Sequence[Receipt],
                 controls: Sequence[Receipt], reports: Sequence[MediaReport]) -> list[GateRow]:
    """The quality-gate table of one screen: one row per gate of the track's mode, with the
    scope's threshold and source and the values the media reports measured for this
    screen's candidate outputs against ``controls`` (the control pool: same track and
    control config).  The engine's own outcome is :func:`evidence.verdicts.judge_quality`;
    these rows show the numbers behind it."""
    cand, ctrl = _outputs(candidates), _outputs(controls)
    same = bool(cand) and cand <= ctrl
    mine = [r for r in reports if r.candidate.sha256 in cand and r.control.sha256 in ctrl]
    if track.quality_mode == "lossless":
        return _lossless_rows(same, mine, controls, reports)
    rows = [_perceptual_row(scope, name, metric_names, same, mine)
            for name, metric_names in PERCEPTUAL_GATES.items()]
    return [*rows, _structural_row(scope, same, mine)]


_REPEATABILITY: Mapping[str, Outcome] = MappingProxyType({"established": "pass",
                                                         "differs": "fail"})
"""Control repeatability state (:func:`evidence.verdicts.control_repeatability`) -> outcome;
any other state is not shown."""


def _lossless_rows(same: bool, mine: Sequence[MediaReport], controls: Sequence[Receipt],
                   reports: Sequence[MediaReport]) -> list[GateRow]:
    """A lossless track's rows: bit-exact with control, and control repeatability."""
    bit: tuple[str, Outcome] = ("candidate MP4 digests equal control's", "pass") if same \
        else _bit_exact(mine)
    state, text = control_repeatability(controls, reports)
    return [GateRow("bit-exact with control", "decoded frames and PCM equal",
                    "lossless track (campaign scope)", *bit),
            GateRow("control repeatability", "two control sessions give equal decoded output",
                    "lossless track (campaign scope)", text,
                    _REPEATABILITY.get(state, "not shown"))]


def _bit_exact(mine: Sequence[MediaReport]) -> tuple[str, Outcome]:
    """What the media reports' bit-exact comparisons say: ``(observed, outcome)``."""
    bits = [(r.bit_exact.frames_equal, r.bit_exact.pcm_equal) for r in mine
            if r.bit_exact is not None]
    if not bits:
        return "no bit-exact comparison with control", "not shown"
    if all(f and p for f, p in bits):
        return f"{len(bits)} report(s): frames and PCM equal", "pass"
    if any(not f or p is False for f, p in bits):
        return "decoded frames or PCM differ from control", "fail"
    return "frames equal, PCM not compared", "not shown"


def _perceptual_row(scope: CampaignScope, name: str, metric_names: Iterable[str], same: bool,
                    mine: Sequence[MediaReport]) -> GateRow:
    """The row of perceptual gate ``name``: the scope's rule and source, the values the lossy
    media reports measured (``metric_names``), and whether each is within the rule."""
    rule, source, within = _gate_rule(scope, name)
    if same:
        return GateRow(name, rule, source, "output identical to control", "pass")
    vals = _lossy_values(mine, metric_names)
    if not vals:
        return GateRow(name, rule, source, "no lossy media report", "not shown")
    return GateRow(name, rule, source, ", ".join(_fmt(v) for v in vals),
                   _outcome(vals, within))


def _lossy_values(mine: Sequence[MediaReport], metric_names: Iterable[str]
                  ) -> list[float | None]:
    """The values of the metrics ``metric_names`` in the lossy media reports ``mine``."""
    return [mt.value for r in mine if r.mode == "lossy" for mt in r.metrics
            if mt.name in metric_names]


def _outcome(vals: Sequence[float | None], within: Callable[[float], bool]) -> Outcome:
    """``fail`` when a value breaks the rule, else ``not shown`` when one is missing or NaN,
    else ``pass``."""
    ok = [None if v is None or math.isnan(v) else within(v) for v in vals]
    return "fail" if False in ok else "not shown" if None in ok else "pass"


def _gate_rule(scope: CampaignScope, name: str) -> tuple[str, str, Callable[[float], bool]]:
    """Perceptual gate ``name`` of the scope: ``(rule as text, its source, test of a
    value)``: a range for the audio RMS ratio, ``<=`` for a ``*_max`` gate, else ``>=``."""
    g = scope.quality_gates
    if name == "audio_rms_ratio":
        lo, hi = g.audio_rms_ratio.low, g.audio_rms_ratio.high
        return f"in [{lo:g}, {hi:g}]", g.audio_rms_ratio.source, lambda v: lo <= v <= hi
    gate = getattr(g, name)
    if name.endswith("_max"):
        return f"<= {gate.threshold:g}", gate.source, lambda v: v <= gate.threshold
    return f">= {gate.threshold:g}", gate.source, lambda v: v >= gate.threshold


def _structural_row(scope: CampaignScope, same: bool, mine: Sequence[MediaReport]) -> GateRow:
    """The row of the structural checks (with the campaign's audio latent rate when it names
    one: a model's audio rule)."""
    lat = scope.quality_gates.audio_latent_rate_hz
    if lat is not None:
        label, rule, source = ("structural checks (incl. audio latent rate)",
                               f"all pass; audio latents at {lat.threshold:g} Hz", lat.source)
    else:
        label, rule, source = ("structural checks", "all pass (generic audio coverage)",
                               "media-gates/3 structural validator")
    if same:
        return GateRow(label, rule, source, "output identical to control", "pass")
    checks = [c for r in mine for c in r.structural]
    if not checks:
        return GateRow(label, rule, source, "no structural report", "not shown")
    bad = [c.name for c in checks if not c.passed]
    return GateRow(label, rule, source,
                   f"{len(checks) - len(bad)} of {len(checks)} pass"
                   + (f"; failed: {', '.join(bad)}" if bad else ""),
                   "fail" if bad else "pass")


def _best(vs: Sequence[TrackVerdict]) -> TrackVerdict | None:
    ranked = sorted((v for v in vs if v.candidate is not None), key=lambda v: (
        VERDICT_RANK.get(v.verdict, 9), v.ratio if v.ratio is not None else math.inf,
        v.candidate or ""))
    return ranked[0] if ranked else None


def _budget_from_receipts(scope: CampaignScope, screens: Sequence[ScreenView]
                          ) -> list[BudgetPoint]:
    """One point per screen in order of its last session's end: cumulative use, failed
    sessions included (failures and retries are charged, as campaign #297's budget counts them)."""
    b = scope.budget
    out: list[BudgetPoint] = []
    seen: set[str] = set()
    wall = dev = failed = 0.0
    for s in sorted(screens, key=lambda s: (s.ended_at, s.screen_id)):
        seen.update(c for c in s.candidates)
        wall += s.hours
        dev += s.device_hours
        failed += sum(x.device_hours for x in s.sessions if x.failed)
        out.append(BudgetPoint(s.ended_at, s.screen_id, len(seen), wall, dev, failed,
                               b.candidate_directions, b.wall_hours, b.device_hours))
    return out


def _budget_from_ledger(scope: CampaignScope, ledger: Ledger) -> list[BudgetPoint]:
    """One point per ledger entry, oldest first: cumulative charges and directions, and the
    ceilings raised by ``extend`` entries."""
    b = scope.budget
    out: list[BudgetPoint] = []
    dirs = 0
    wall = dev = failed = 0.0
    allowed = [float(b.candidate_directions), b.wall_hours, b.device_hours]
    failed_screens = {s.id for s in ledger.screens if s.state == "failed"}
    for e in ledger.entries:
        if e.kind == "extend":
            allowed[0] += e.directions
            allowed[1] += e.wall_hours
            allowed[2] += e.device_hours
        elif e.kind == "direction":
            dirs += 1
        elif e.kind == "charge":
            wall += e.wall_hours
            dev += e.device_hours
            if e.screen in failed_screens:
                failed += e.device_hours
        out.append(BudgetPoint(e.at, f"{e.kind}: {e.reason}", dirs, wall, dev, failed,
                               *allowed))
    return out


def budget_view(scope: CampaignScope, screens: Sequence[ScreenView],
                ledger: Ledger | None) -> BudgetView:
    """Budget lines and history.  Without a ledger, use comes from receipts (session hours
    x devices, every session counted, failures included) and nothing is known about
    reservations; with one, the bot's charges, extensions and open screens' estimates are
    the figures (as the bot's ``/campaign budget`` reports them) and the receipts' series
    is kept beside them for comparison."""
    rec = _budget_from_receipts(scope, screens)
    if ledger is None:
        return BudgetView(_receipt_lines(scope, screens, rec), rec, None, None)
    led = _budget_from_ledger(scope, ledger)
    return BudgetView(_ledger_lines(scope, ledger, led), rec, led, ledger)


def _receipt_lines(scope: CampaignScope, screens: Sequence[ScreenView],
                   rec: Sequence[BudgetPoint]) -> list[BudgetLine]:
    """Budget lines from the receipts' series ``rec``: use only, no reservations known."""
    b = scope.budget
    last = rec[-1] if rec else BudgetPoint(datetime.fromtimestamp(0, UTC), "", 0, 0.0, 0.0,
                                           0.0, 0.0, 0.0, 0.0)
    return [
        BudgetLine("candidate directions", "", float(last.directions), None,
                   float(b.candidate_directions)),
        BudgetLine("wall-hours", "h", last.wall_h, None, b.wall_hours,
                   failed=sum(x.hours for s in screens for x in s.sessions if x.failed)),
        BudgetLine("device-hours", "h", last.device_h, None, b.device_hours,
                   failed=last.failed_device_h),
    ]


OPEN_STATES = ("queued", "dispatched", "running", "cancelling")
"""Screen states whose estimate is reserved from the budget (the bot's screens table)."""


def _ledger_lines(scope: CampaignScope, ledger: Ledger, led: Sequence[BudgetPoint]
                  ) -> list[BudgetLine]:
    """Budget lines from the bot's ledger: charges and extensions (the series ``led``) and
    the open screens' estimates as reserved."""
    b = scope.budget
    end = led[-1] if led else BudgetPoint(
        datetime.fromtimestamp(0, UTC), "", 0, 0.0, 0.0, 0.0, float(b.candidate_directions),
        b.wall_hours, b.device_hours)
    open_screens = [s for s in ledger.screens if s.state in OPEN_STATES]
    failed_wall = sum(s.charged_wall_h or 0.0 for s in ledger.screens if s.state == "failed")
    return [
        BudgetLine("candidate directions", "", float(end.directions), None,
                   end.directions_allowed),
        BudgetLine("wall-hours", "h", end.wall_h, sum(s.estimate_wall_h for s in open_screens),
                   end.wall_allowed_h, failed=failed_wall),
        BudgetLine("device-hours", "h", end.device_h,
                   sum(s.estimate_device_h for s in open_screens), end.device_allowed_h,
                   failed=end.failed_device_h),
    ]


def build_site(root: Path, *, ledger: Ledger | None = None,
               source_url: str | None = None) -> Site:
    """Read the campaign directory ``root`` and build the :class:`Site`.

    ``ledger``: the bot's budget ledger and screens for this campaign (see
    :func:`bot.features.dashboard.ledger.read_ledger`).  ``source_url``: see
    :attr:`Site.source_url`.  Raises ``OSError`` when ``root`` cannot be read and
    :class:`CampaignUnreadable` when it has no valid ``campaign.toml``; every other problem
    is a finding shown on the site.
    """
    root = Path(root)
    lc = load_campaign(root)
    rep = check_campaign(root, loaded=lc)  # read once: the same documents for both
    if lc.scope is None:
        first = [f"{f.path}:{f.line or '-'}: {f.message}" for f in lc.findings
                 if f.path == "campaign.toml"][:3]
        raise CampaignUnreadable(
            "no valid campaign.toml: " + ("; ".join(first) or "campaign.toml is missing"))
    scope = lc.scope.model
    unverified = unverified_paths(rep.findings)
    docs = _document_files(lc, unverified)
    counts = session_counts(((d.model, d.path) for d in lc.receipts), unverified)
    screens = _screens(lc, rep, scope, Evidence.from_loaded(lc, unverified), docs, counts)
    budget = budget_view(scope, screens, ledger)
    as_of = max((s.ended_at for s in screens), default=None)
    src = status_source(lc, rep)
    status = campaign_status(scope, src, budget, as_of, source_url)
    return Site(scope=scope, root_name=root.resolve().name, tracks=_track_rows(scope, rep, counts),
                verdicts=rep.verdicts, screening=rep.screening, screens=screens,
                pools=_pool_views(scope, screens), budget=budget, findings=rep.findings,
                documents=docs, check=rep, status=status, source_url=source_url,
                status_source=src)


def _screens(lc: LoadedCampaign, rep: CheckReport, scope: CampaignScope, ev: Evidence,
             docs: Sequence[DocumentFile], counts: SessionCounts) -> list[ScreenView]:
    """One view per ``screen_id`` of the receipts, in order of its first session's start."""
    doc_by_path = {d.path: d for d in docs}
    findings_by_path = _grouped(rep.findings, lambda f: f.path)
    controls = _grouped(_controls(ev), lambda r: r.track)  # track -> controls, path order
    reports = [r.report for r in ev.reports]
    screens = []
    for sid, items in _grouped(((d.model, d.path) for d in lc.receipts),
                               lambda rp: rp[0].screen_id).items():
        items.sort(key=lambda rp: (rp[0].slot, rp[0].session_id))
        rs = [r for r, _ in items]
        cands = _candidates(rs)
        q_rows, q_reasons = _screen_quality(scope, rs, cands, controls, reports)
        sessions = [_session(r, doc_by_path.get(p), scope, counts) for r, p in items]
        screens.append(ScreenView(
            screen_id=sid, slug=slug(sid), tracks=sorted({r.track for r in rs}),
            candidates=cands, pool=sessions[0].pool, order=_order(rs), sessions=sessions,
            screening=_screen_screening(rep, sid), verdicts=_screen_verdicts(rep, sid),
            quality=q_rows, quality_reasons=q_reasons,
            findings=_findings_of([p for _, p in items], findings_by_path)))
    screens.sort(key=lambda s: (s.started_at, s.screen_id))
    return screens


def _grouped(items: Iterable[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    """``key(item) -> items`` with that key, in the order given."""
    out: dict[str, list[T]] = defaultdict(list)
    for item in items:
        out[key(item)].append(item)
    return out


def _controls(ev: Evidence) -> list[Receipt]:
    """The control receipts of the verdict engine's evidence, in path order."""
    return [i.receipt for i in ev.receipts if i.receipt.arm == "control"]


def _candidates(rs: Sequence[Receipt]) -> list[str]:
    """The candidate names of receipts ``rs``, sorted."""
    return sorted({r.candidate for r in rs if r.arm == "candidate" and r.candidate})


def _order(rs: Sequence[Receipt]) -> str | None:
    """The arm order (``ABBA`` ...) the first receipt recording one names."""
    return next((r.order for r in rs if r.order), None)


def _screen_screening(rep: CheckReport, sid: str) -> list[ScreeningDecision]:
    """The engine's screening decisions of screen ``sid`` (never verdicts)."""
    return [d for d in rep.screening if d.screen_id == sid]


def _findings_of(paths: Sequence[str], by_path: dict[str, list[Finding]]) -> list[Finding]:
    """The findings on the documents at ``paths``, in that order."""
    return [f for p in paths for f in by_path.get(p, [])]


def _screen_verdicts(rep: CheckReport, sid: str) -> list[TrackVerdict]:
    """The engine's candidate verdicts that count screen ``sid``."""
    return [v for v in rep.verdicts if sid in v.screens and v.candidate is not None]


def _screen_quality(scope: CampaignScope, rs: Sequence[Receipt], cands: Sequence[str],
                    controls: dict[str, list[Receipt]], reports: Sequence[MediaReport]
                    ) -> tuple[list[GateRow], list[Reason]]:
    """The quality-gate rows and the engine's failed or unproven gates of one screen's
    receipts ``rs``, per track and candidate, against the verdict engine's control pool
    (same track, same control config)."""
    tracks = {t.id: t for t in scope.tracks}
    rows: list[GateRow] = []
    reasons: list[Reason] = []
    for tr in sorted({r.track for r in rs} & set(tracks)):
        pool = _control_pool(rs, tr, controls.get(tr, []))
        for c in cands:
            mine = _candidate_receipts(rs, c, tr)
            rows += quality_rows(tracks[tr], scope, mine, pool, reports)
            q = judge_quality(tracks[tr], scope, mine, pool, reports)
            reasons += q.failed + q.unproven
    return rows, reasons


def _control_pool(rs: Sequence[Receipt], track: str, controls: Sequence[Receipt]
                  ) -> list[Receipt]:
    """The verdict engine's control pool for ``track``: every control receipt of the
    campaign with a control config this screen (``rs``) ran on that track."""
    digests = frozenset(r.config_digest for r in rs if r.arm == "control" and r.track == track)
    return [r for r in controls if r.config_digest in digests]


def _candidate_receipts(rs: Sequence[Receipt], candidate: str, track: str) -> list[Receipt]:
    """The receipts of ``candidate``'s sessions on ``track`` among ``rs``."""
    return [r for r in rs
            if r.arm == "candidate" and r.candidate == candidate and r.track == track]


def _track_rows(scope: CampaignScope, rep: CheckReport, counts: SessionCounts
                ) -> list[TrackRow]:
    """The index's rows: each track's control baseline and its best candidate."""
    rows = []
    for t in scope.tracks:
        vs = [v for v in rep.verdicts if v.track == t.id]
        rows.append(TrackRow(
            track=t, baseline_median_s=counts.control_baseline_s(t.id),
            baseline_sessions=counts.qualifying_controls(t.id), best=_best(vs),
            verdicts=[v for v in vs if v.candidate is not None],
            screening=dict(Counter(d.decision for d in rep.screening if d.track == t.id))))
    return rows


def _pool_views(scope: CampaignScope, screens: Sequence[ScreenView]) -> list[PoolView]:
    """Each hardware pool with control sessions (and the scope's own pool), by name."""
    pools: dict[str, list[SessionView]] = defaultdict(list)
    for sc in screens:
        for s in sc.sessions:
            if s.arm == "control":
                pools[s.pool].append(s)
    return [_pool_view(scope, name, pools.get(name, []))
            for name in sorted(set(pools) | {scope.pool.name})]


def _pool_view(scope: CampaignScope, name: str, ss: Sequence[SessionView]) -> PoolView:
    """Pool ``name`` from its control sessions ``ss``: qualifying medians over time and the
    screens that ran them."""
    known = name == scope.pool.name
    return PoolView(name, slug(name), scope.pool.device_model if known else None,
                    scope.pool.device_count if known else None, _control_points(ss),
                    _pool_screens(ss))


def _control_points(ss: Sequence[SessionView]) -> list[ControlPoint]:
    """The qualifying control sessions' medians among ``ss``, by start time."""
    return sorted((ControlPoint(s.started_at, s.median_s, s.session_id, s.screen_id,
                                s.track, s.config_digest)
                   for s in ss if s.qualifies and s.median_s is not None),
                  key=lambda p: (p.at, p.session_id))


def _pool_screens(ss: Sequence[SessionView]) -> list[PoolScreen]:
    """The screens of control sessions ``ss``, with their count and median, by start."""
    used: dict[str, list[SessionView]] = defaultdict(list)
    for s in ss:
        used[s.screen_id].append(s)
    out = []
    for sid, group in used.items():
        meds = [s.median_s for s in group if s.qualifies and s.median_s is not None]
        out.append(PoolScreen(sid, slug(sid), group[0].track, len(group),
                              statistics.median(meds) if meds else None,
                              min(s.started_at for s in group)))
    return sorted(out, key=lambda p: (p.started_at, p.screen_id))


def status_source(lc: LoadedCampaign, rep: CheckReport) -> EvidenceSource:
    """What the status sentences are computed from: the receipts of ``lc``, the engine's
    verdicts and screening decisions of ``rep`` and the review findings."""
    return EvidenceSource(
        sha="", receipts=[d.model for d in lc.receipts],
        verdicts=[tv for v in rep.verdicts if (tv := track_verdict_from(v)) is not None],
        screens=latest_screen_decisions(rep.screening), findings=list(rep.findings))


def campaign_status(scope: CampaignScope, src: EvidenceSource, budget: BudgetView,
                    as_of: datetime | None, source_url: str | None,
                    queue: Sequence[QueueItem] | None = None) -> HeaderContent | None:
    """The status header's content (:func:`evidence.header.build_header`) for the evidence
    ``src`` (:func:`status_source`) and the budget lines shown on the site (the ledger's
    when read).  ``queue``: the bot's screen queue (the live pages read it from the bot's
    database); None (the static site) means unknown, and the header then says so.
    ``as_of`` (the latest session's end) is the evidence time; the sentences do not show
    it."""
    lines = [HeaderBudgetLine(b.name, b.used, b.allowed, b.unit, b.reserved or 0.0)
             for b in budget.lines]
    return build_header(scope, [src], EvidenceRef("", as_of or datetime.fromtimestamp(0, UTC),
                                                          source_url), budget=lines,
                        queue=queue)
