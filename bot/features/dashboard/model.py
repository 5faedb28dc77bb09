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
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

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
from evidence.models import CampaignScope, Finding, MediaReport, Receipt, Track
from evidence.review import unverified_paths
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
    codes = Counter((w.state, w.exit_code, w.signal) for w in lc.workers)
    out = []
    for (state, code, sig), k in sorted(codes.items(), key=str):
        what = f"exit {code}" if state == "exited" and sig is None else (
            f"signal {sig}" if sig is not None else state)
        out.append(f"{k} worker(s) {what}")
    if not lc.workers:
        out.append("no worker exits recorded")
    if lc.terminate_actions or lc.kill_actions:
        out.append(f"{lc.terminate_actions} terminate, {lc.kill_actions} kill action(s)")
    out += [f"forced: {a}" for a in lc.forced_actions]
    out.append(f"server exit {lc.server_exit_code}"
               + (f", signal {lc.server_signal}" if lc.server_signal is not None else ""))
    if lc.container_exit_code is not None:
        out.append(f"container exit {lc.container_exit_code}")
    for label, chk in (("before", lc.devices_idle_before), ("after", lc.devices_idle_after)):
        out.append(f"devices idle {label}: " + ("not checked" if chk is None else
                                                "yes" if chk.idle else "NO"))
    if lc.interrupted:
        out.append("interrupted")
    return out


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
    same = cand and cand <= ctrl
    rows: list[GateRow] = []
    mine = [r for r in reports if r.candidate.sha256 in cand and r.control.sha256 in ctrl]
    if track.quality_mode == "lossless":
        if same:
            obs, out = "candidate MP4 digests equal control's", "pass"
        else:
            bits = [(r.bit_exact.frames_equal, r.bit_exact.pcm_equal) for r in mine
                    if r.bit_exact is not None]
            if not bits:
                obs, out = "no bit-exact comparison with control", "not shown"
            elif all(f and p for f, p in bits):
                obs, out = f"{len(bits)} report(s): frames and PCM equal", "pass"
            elif any(not f or p is False for f, p in bits):
                obs, out = "decoded frames or PCM differ from control", "fail"
            else:
                obs, out = "frames equal, PCM not compared", "not shown"
        rows.append(GateRow("bit-exact with control", "decoded frames and PCM equal",
                            "lossless track (campaign scope)", obs, out))  # type: ignore[arg-type]
        state, text = control_repeatability(controls, reports)
        rows.append(GateRow("control repeatability", "two control sessions give equal "
                            "decoded output", "lossless track (campaign scope)", text,
                            {"established": "pass", "differs": "fail"}.get(
                                state, "not shown")))  # type: ignore[arg-type]
        return rows
    g = scope.quality_gates
    for name, metric_names in PERCEPTUAL_GATES.items():
        if name == "audio_rms_ratio":
            rule, source = f"in [{g.audio_rms_ratio.low:g}, {g.audio_rms_ratio.high:g}]", \
                g.audio_rms_ratio.source
        else:
            gate = getattr(g, name)
            rule = f"{'<=' if name.endswith('_max') else '>='} {gate.threshold:g}"
            source = gate.source
        if same:
            rows.append(GateRow(name, rule, source, "output identical to control", "pass"))
            continue
        vals = [mt.value for r in mine if r.mode == "lossy" for mt in r.metrics
                if mt.name in metric_names]
        if not vals:
            rows.append(GateRow(name, rule, source, "no lossy media report", "not shown"))
            continue
        ok: list[bool | None] = []
        for v in vals:
            if v is None or math.isnan(v):
                ok.append(None)
            elif name == "audio_rms_ratio":
                ok.append(g.audio_rms_ratio.low <= v <= g.audio_rms_ratio.high)
            elif name.endswith("_max"):
                ok.append(v <= getattr(g, name).threshold)
            else:
                ok.append(v >= getattr(g, name).threshold)
        outcome = "fail" if False in ok else "not shown" if None in ok else "pass"
        rows.append(GateRow(name, rule, source, ", ".join(_fmt(v) for v in vals),
                            outcome))  # type: ignore[arg-type]
    lat = g.audio_latent_rate_hz
    checks = [c for r in mine for c in r.structural]
    bad = [c.name for c in checks if not c.passed]
    if lat is not None:  # a model's audio rule, only where the campaign names one
        label, rule, source = ("structural checks (incl. audio latent rate)",
                               f"all pass; audio latents at {lat.threshold:g} Hz", lat.source)
    else:
        label, rule, source = ("structural checks", "all pass (generic audio coverage)",
                               "media-gates/3 structural validator")
    rows.append(GateRow(label, rule, source,
                        "output identical to control" if same else
                        (f"{len(checks) - len(bad)} of {len(checks)} pass"
                         + (f"; failed: {', '.join(bad)}" if bad else "")) if checks
                        else "no structural report",
                        "pass" if same or (checks and not bad) else
                        "fail" if bad else "not shown"))
    return rows


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
    b = scope.budget
    last = rec[-1] if rec else None
    if ledger is None:
        lines = [
            BudgetLine("candidate directions", "", float(last.directions if last else 0), None,
                       float(b.candidate_directions)),
            BudgetLine("wall-hours", "h", last.wall_h if last else 0.0, None, b.wall_hours,
                       failed=sum(x.hours for s in screens for x in s.sessions if x.failed)),
            BudgetLine("device-hours", "h", last.device_h if last else 0.0, None,
                       b.device_hours, failed=last.failed_device_h if last else 0.0),
        ]
        return BudgetView(lines, rec, None, None)
    led = _budget_from_ledger(scope, ledger)
    open_states = ("queued", "dispatched", "running", "cancelling")
    res_dev = sum(s.estimate_device_h for s in ledger.screens if s.state in open_states)
    res_wall = sum(s.estimate_wall_h for s in ledger.screens if s.state in open_states)
    end = led[-1] if led else None
    failed_wall = sum(s.charged_wall_h or 0.0 for s in ledger.screens if s.state == "failed")
    lines = [
        BudgetLine("candidate directions", "", float(end.directions if end else 0), None,
                   end.directions_allowed if end else float(b.candidate_directions)),
        BudgetLine("wall-hours", "h", end.wall_h if end else 0.0, res_wall,
                   end.wall_allowed_h if end else b.wall_hours, failed=failed_wall),
        BudgetLine("device-hours", "h", end.device_h if end else 0.0, res_dev,
                   end.device_allowed_h if end else b.device_hours,
                   failed=end.failed_device_h if end else 0.0),
    ]
    return BudgetView(lines, rec, led, ledger)


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
    ev = Evidence.from_loaded(lc, unverified)
    docs = _document_files(lc, unverified)
    doc_by_path = {d.path: d for d in docs}
    reports = [r.report for r in ev.reports]
    tracks = {t.id: t for t in scope.tracks}

    counts = session_counts(((d.model, d.path) for d in lc.receipts), unverified)
    by_screen: dict[str, list[tuple[Receipt, str]]] = defaultdict(list)
    for d in lc.receipts:
        by_screen[d.model.screen_id].append((d.model, d.path))
    findings_by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in rep.findings:
        findings_by_path[f.path].append(f)

    controls: dict[str, list[Receipt]] = defaultdict(list)  # track -> controls, path order
    for i in ev.receipts:
        if i.receipt.arm == "control":
            controls[i.receipt.track].append(i.receipt)
    screens: list[ScreenView] = []
    for sid, items in by_screen.items():
        items.sort(key=lambda rp: (rp[0].slot, rp[0].session_id))
        rs = [r for r, _ in items]
        sessions = [_session(r, doc_by_path.get(p), scope, counts) for r, p in items]
        trs = sorted({r.track for r in rs})
        cands = sorted({r.candidate for r in rs if r.arm == "candidate" and r.candidate})
        q_rows: list[GateRow] = []
        q_reasons: list[Reason] = []
        for tr in trs:
            track = tracks.get(tr)
            if track is None:
                continue
            digests = frozenset(r.config_digest for r in rs
                                if r.arm == "control" and r.track == tr)
            # the control pool of the verdict engine: same track, same control config
            pool = [r for r in controls.get(tr, []) if r.config_digest in digests]
            for c in cands:
                mine = [r for r in rs if r.candidate == c and r.track == tr
                        and r.arm == "candidate"]
                q_rows += quality_rows(track, scope, mine, pool, reports)
                q = judge_quality(track, scope, mine, pool, reports)
                q_reasons += q.failed + q.unproven
        screens.append(ScreenView(
            screen_id=sid, slug=slug(sid), tracks=trs, candidates=cands,
            pool=sessions[0].pool if sessions else scope.pool.name,
            order=next((r.order for r in rs if r.order), None), sessions=sessions,
            screening=[d for d in rep.screening if d.screen_id == sid],
            verdicts=[v for v in rep.verdicts if sid in v.screens and v.candidate is not None],
            quality=q_rows, quality_reasons=q_reasons,
            findings=[f for _, p in items for f in findings_by_path.get(p, [])]))
    screens.sort(key=lambda s: (s.started_at, s.screen_id))

    rows = []
    for t in scope.tracks:
        vs = [v for v in rep.verdicts if v.track == t.id]
        rows.append(TrackRow(
            track=t, baseline_median_s=counts.control_baseline_s(t.id),
            baseline_sessions=counts.qualifying_controls(t.id), best=_best(vs),
            verdicts=[v for v in vs if v.candidate is not None],
            screening=dict(Counter(d.decision for d in rep.screening if d.track == t.id))))

    pools: dict[str, list[SessionView]] = defaultdict(list)
    for sc in screens:
        for s in sc.sessions:
            if s.arm == "control":
                pools[s.pool].append(s)
    pool_views = []
    for name in sorted(set(pools) | {scope.pool.name}):
        ss = pools.get(name, [])
        pts = sorted((ControlPoint(s.started_at, s.median_s, s.session_id, s.screen_id,
                                   s.track, s.config_digest)
                      for s in ss if s.qualifies and s.median_s is not None),
                     key=lambda p: (p.at, p.session_id))
        used: dict[str, list[SessionView]] = defaultdict(list)
        for s in ss:
            used[s.screen_id].append(s)
        pscreens = []
        for sid, group in used.items():
            meds = [s.median_s for s in group if s.qualifies and s.median_s is not None]
            pscreens.append(PoolScreen(sid, slug(sid), group[0].track, len(group),
                                       statistics.median(meds) if meds else None,
                                       min(s.started_at for s in group)))
        pscreens.sort(key=lambda p: (p.started_at, p.screen_id))
        known = name == scope.pool.name
        pool_views.append(PoolView(name, slug(name),
                                   scope.pool.device_model if known else None,
                                   scope.pool.device_count if known else None, pts, pscreens))

    budget = budget_view(scope, screens, ledger)
    as_of = max((s.ended_at for s in screens), default=None)
    src = status_source(lc, rep)
    status = campaign_status(scope, src, budget, as_of, source_url)
    return Site(scope=scope, root_name=root.resolve().name, tracks=rows,
                verdicts=rep.verdicts, screening=rep.screening, screens=screens,
                pools=pool_views, budget=budget, findings=rep.findings, documents=docs,
                check=rep, status=status, source_url=source_url, status_source=src)


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
