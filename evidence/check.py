"""``campaign-bot check DIR``: validate every document and verify every manifest of a campaign
directory in one pass, and summarise its sessions per screen, track and arm.

:func:`check_campaign` returns a :class:`CheckReport` (pure data, also printed by ``--json``);
:func:`render` prints it with rich.  Exit codes: 0 clean (only P3 notes, if any), 1 problems
found (any P0, P1 or P2 finding), 2 unreadable input or bad usage (the directory itself is
missing or cannot be listed).

Warmups are shown apart and never counted: ``measured_*`` columns come from measured
requests only.  Medians are of per-session medians of measured, successful (HTTP 200, no
error) requests' client wall seconds: the session is the unit (DESIGN.md), so a session with
three requests does not weigh three times.  The verdicts list is filled by the verdict engine
(issue 3); this module computes no verdict statistics.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evidence.bundle import LoadedCampaign, load_campaign
from evidence.claims import Claim
from evidence.manifest import (
    DEFAULT_MAX_FILE_BYTES,
    ExternalDigest,
    ManifestSummary,
    ProgressFn,
    VerifyResult,
    index_tree,
    verify_tree,
)
from evidence.models import Finding
from evidence.screening import ScreeningDecision
from evidence.verdicts import TrackVerdict

SEVERITY_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
FAILING = frozenset({"P0", "P1", "P2"})
"""Severities that make ``check`` exit 1; P3 notes are printed but do not fail."""


class ArmSummary(BaseModel):
    """Sessions of one arm of one screen on one track.

    ``measured_requests`` counts measured requests only (warmups are in ``warmups``);
    ``median_client_wall_s`` is the median over sessions of each session's median measured
    client wall seconds (HTTP 200, no error); None when no measured request succeeded.
    """

    screen_id: str
    track: str
    arm: str
    candidate: str | None = None
    sessions: int
    sessions_clean: int = Field(description="Sessions whose lifecycle has no problem.")
    measured_requests: int
    measured_ok: int
    measured_failed: int
    warmups: int
    median_client_wall_s: float | None = None
    median_server_inference_s: float | None = None
    warmup_client_wall_s: list[float] = Field(
        default_factory=list, description="Each successful warmup, shown apart, not counted.")
    lifecycle_problems: list[str] = Field(
        default_factory=list, description="Distinct lifecycle problems over the sessions.")
    receipts: list[str] = Field(default_factory=list)


class CheckReport(BaseModel):
    """``campaign-bot/check-report@1``: the result of ``campaign-bot check``."""

    schema_: str = Field(default="campaign-bot/check-report@1", alias="schema")
    root: str
    campaign: str | None = None
    documents: dict[str, int] = Field(
        default_factory=dict,
        description="campaign, receipts, statuses, media_reports, json_files validated.")
    hashes_checked: int = 0
    hash_errors: int = Field(0, description="Mismatched + missing + unsafe + malformed.")
    external_digests: int = 0
    files_hashed: int = 0
    bytes_hashed: int = 0
    manifests: list[ManifestSummary] = Field(default_factory=list)
    external: list[ExternalDigest] = Field(default_factory=list)
    arms: list[ArmSummary] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    verdicts: list[TrackVerdict] = Field(
        default_factory=list, description="Per-track verdicts, added by the verdict engine.")
    screening: list[ScreeningDecision] = Field(
        default_factory=list,
        description="Screening decisions (issue 3): never verdicts.")
    claims: list[Claim] = Field(
        default_factory=list, description="With --claims: every stated number and its source.")
    seconds: float = 0.0
    exit_code: int = 0

    model_config = {"populate_by_name": True}

    @property
    def problems(self) -> list[Finding]:
        """Findings that fail the check (P0-P2)."""
        return [f for f in self.findings if f.severity in FAILING]


def summarize_arms(lc: LoadedCampaign) -> list[ArmSummary]:
    """Group receipts by (screen, track, arm, candidate); see :class:`ArmSummary`."""
    groups: dict[tuple[str, str, str, str | None], list] = defaultdict(list)
    for d in lc.receipts:
        r = d.model
        groups[(r.screen_id, r.track, r.arm, r.candidate)].append(d)
    out = []
    for (screen, track, arm, cand), docs in groups.items():
        session_medians = []
        server = []
        warm = []
        n_meas = n_ok = n_warm = clean = 0
        problems: list[str] = []
        for d in sorted(docs, key=lambda d: d.model.slot):
            r = d.model
            p = r.lifecycle.problems()
            clean += not p
            problems += [x for x in p if x not in problems]
            ok = [q for q in r.measured if q.ok and q.client_wall_s is not None]
            n_meas += len(r.measured)
            n_ok += len(ok)
            n_warm += len(r.warmups)
            warm += [q.client_wall_s for q in r.warmups if q.ok and q.client_wall_s is not None]
            if ok:
                session_medians.append(statistics.median(q.client_wall_s for q in ok))
            srv = [q.server_inference_s for q in ok if q.server_inference_s is not None]
            if srv:
                server.append(statistics.median(srv))
        out.append(ArmSummary(
            screen_id=screen, track=track, arm=arm, candidate=cand, sessions=len(docs),
            sessions_clean=clean, measured_requests=n_meas, measured_ok=n_ok,
            measured_failed=n_meas - n_ok, warmups=n_warm,
            median_client_wall_s=statistics.median(session_medians) if session_medians
            else None,
            median_server_inference_s=statistics.median(server) if server else None,
            warmup_client_wall_s=warm, lifecycle_problems=problems,
            receipts=[d.path for d in docs]))
    out.sort(key=lambda a: (a.screen_id, a.track, a.arm != "control", a.candidate or ""))
    return out


def check_campaign(root: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                   progress: ProgressFn | None = None,
                   workers: int | None = None,
                   base_ref: str | None = None,
                   claims_file: Path | None = None,
                   prior_noise: bool = False) -> CheckReport:
    """Load, validate and verify ``root``; see the module docstring.

    Issue 3 adds the per-track verdicts, screening decisions and review findings; with
    ``base_ref`` the FROZEN_RECEIPT_CHANGED rule, with ``claims_file`` the claim rules,
    with ``prior_noise`` the labelled prior-noise mode (see :mod:`evidence.review`).

    Raises ``OSError`` (NotADirectoryError, FileNotFoundError, PermissionError) only when
    ``root`` itself (or ``claims_file``) cannot be read, ``evidence.findings.BaseRefError``
    for an unreadable ``base_ref`` and ValueError for ``claims_file`` without a campaign
    scope; every other problem is a finding.
    """
    t0 = time.perf_counter()
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    idx = index_tree(root)
    lc = load_campaign(root, max_file_bytes=max_file_bytes, index=idx)
    vr: VerifyResult = verify_tree(root, max_file_bytes=max_file_bytes, progress=progress,
                                   workers=workers, index=idx, json_docs=lc.json_docs)
    findings = []
    once: set[tuple[str, str]] = set()
    for f in [*lc.findings, *vr.findings]:
        if f.rule in ("UNREADABLE", "FILE_TOO_LARGE"):  # the loader and the verifier both
            if (f.rule, f.path) in once:                 # meet such a file: say it once
                continue
            once.add((f.rule, f.path))
        findings.append(f)
    if not idx.files and not idx.links and not idx.special:
        findings.append(Finding(rule="EMPTY_BUNDLE", severity="P1", path=".",
                                message="the directory holds no files: nothing to check",
                                resolution="point check at a campaign or bundle directory"))
    elif lc.scope is None and not vr.manifests and not lc.receipts and not lc.statuses:
        findings.append(Finding(rule="EMPTY_BUNDLE", severity="P1", path=".",
                                message="no campaign.toml, no receipts, no status and no "
                                        "manifest found: nothing was checked",
                                resolution="point check at a campaign or bundle directory"))
    if lc.scope is None and "campaign.toml" not in idx.files and lc.receipts and \
            "bagit.txt" not in idx.files:
        findings.append(Finding(rule="SCOPE_MISSING", severity="P2", path="campaign.toml",
                                message="receipts found but no campaign.toml: tracks and "
                                        "candidates cannot be tied to a frozen scope",
                                resolution="add the campaign's campaign.toml at the root"))
    if lc.scope is not None:
        from evidence.reference_rules import reference_findings

        findings += reference_findings(root, lc.scope.path, lc.scope.text,
                                       lc.scope.model.inputs)
    # Issue 3 (verdict engine): consistency rules and per-track verdicts are added here.
    from evidence.review import review_check

    issue3 = review_check(lc, vr.findings, base_ref=base_ref, claims_file=claims_file,
                          prior_noise=prior_noise)
    findings += issue3.findings
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.path, f.line or 0, f.rule))
    rep = CheckReport(
        root=str(root),
        campaign=lc.scope.model.id if lc.scope else None,
        documents={"campaign": int(lc.scope is not None), "receipts": len(lc.receipts),
                   "statuses": len(lc.statuses), "media_reports": len(lc.media_reports),
                   "json_files": len(lc.json_docs)},
        hashes_checked=vr.hashes_checked,
        hash_errors=vr.errors,
        external_digests=len(vr.external),
        files_hashed=vr.files_hashed,
        bytes_hashed=vr.bytes_hashed,
        manifests=vr.manifests,
        external=vr.external,
        arms=summarize_arms(lc),
        findings=findings,
        verdicts=issue3.verdicts,
        screening=issue3.screening,
        claims=issue3.claims,
    )
    rep.exit_code = 1 if rep.problems else 0
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep


# ------------------------------------------------------------------------------- render


def _fmt_s(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _short_lifecycle(problems: list[str]) -> str:
    """Compress lifecycle problems for the table: group workers, merge idle checks."""
    workers: dict[str, int] = {}
    rest: list[str] = []
    idle: list[str] = []
    for p in problems:
        m = re.match(r"^worker (?:rank|pid) \S+ (.*)$", p)
        if m:
            workers[m.group(1)] = workers.get(m.group(1), 0) + 1
        elif p.startswith("devices not shown idle"):
            idle.append(p.rsplit(" ", 1)[1])
        else:
            rest.append(p)
    out = [f"{n} worker(s) {what}" for what, n in workers.items()] + rest
    if idle:
        out.append("no idle check " + "/".join(idle))
    return "; ".join(out) or "clean"


def render(rep: CheckReport, console: Any) -> None:
    """Print ``rep`` as a rich summary: counts, manifests, arms, findings, result line."""
    from rich.markup import escape
    from rich.table import Table

    title = f"campaign [bold]{escape(rep.campaign)}[/]" if rep.campaign else "bundle"
    console.print(f"{title}  ({escape(rep.root)})")
    d = rep.documents
    console.print(
        f"documents: campaign.toml {'valid' if d.get('campaign') else 'absent or invalid'}, "
        f"{d.get('receipts', 0)} receipts, {d.get('statuses', 0)} status snapshots, "
        f"{d.get('media_reports', 0)} media reports valid")
    console.print(
        f"integrity: checked {rep.hashes_checked} hashes in {len(rep.manifests)} manifests, "
        f"{rep.hash_errors} errors; {rep.files_hashed} files, {_bytes(rep.bytes_hashed)} "
        f"hashed; {rep.external_digests} external digests recorded, not verifiable here")
    if rep.manifests:
        t = Table(title="manifests", title_justify="left")
        for c in ("manifest", "kind", "entries", "verified", "mismatched", "missing",
                  "extra", "external", "other"):
            t.add_column(c, justify="left" if c in ("manifest", "kind") else "right")
        for m in rep.manifests:
            t.add_row(escape(m.path), m.kind, str(m.entries), str(m.verified),
                      str(m.mismatched), str(m.missing), str(m.extra), str(m.external),
                      str(m.unsafe + m.malformed + m.duplicates))
        console.print(t)
    if rep.arms:
        t = Table(title="sessions per screen, track and arm (warmups never counted; clean = "
                        "sessions with a clean lifecycle / sessions)", title_justify="left")
        server = any(a.median_server_inference_s is not None for a in rep.arms)
        cols = ["screen", "track", "arm", "clean", "measured", "failed",
                "median client s", "median server s", "warmups s", "lifecycle problems"]
        if not server:
            cols.remove("median server s")
        for c in cols:
            left = c in ("screen", "track", "arm", "lifecycle problems")
            t.add_column(c, justify="left" if left else "right",
                         no_wrap=c == "track",
                         overflow="fold" if c in ("screen", "arm") else "ellipsis")
        for a in rep.arms:
            arm = a.arm if not a.candidate else f"{a.arm} {a.candidate}"
            warm = ", ".join(f"{w:.3f}" for w in a.warmup_client_wall_s)
            row = [escape(a.screen_id), escape(a.track), escape(arm),
                   f"{a.sessions_clean}/{a.sessions}", str(a.measured_requests),
                   str(a.measured_failed), _fmt_s(a.median_client_wall_s)]
            if server:
                row.append(_fmt_s(a.median_server_inference_s))
            row += [f"{a.warmups}" + (f" ({warm})" if warm else ""),
                    escape(_short_lifecycle(a.lifecycle_problems))]
            t.add_row(*row)
        console.print(t)
    from evidence.review import render_review

    render_review(rep.verdicts, rep.screening, rep.claims, console)
    if rep.findings:
        t = Table(title="findings", title_justify="left")
        for c in ("sev", "rule", "file:line", "field", "message"):
            t.add_column(c, overflow="fold")
        for f in rep.findings:
            color = {"P0": "red", "P1": "red", "P2": "yellow", "P3": "dim"}[f.severity]
            loc = f.path + (f":{f.line}" if f.line else "")
            t.add_row(f"[{color}]{f.severity}[/]", f.rule, escape(loc), escape(f.field or ""),
                      escape(f.message))
        console.print(t)
    n = len(rep.problems)
    notes = len(rep.findings) - n
    if n:
        console.print(f"[red]exit 1: {n} problem(s)[/], {notes} note(s)  ({rep.seconds:.2f} s)")
    else:
        console.print(f"[green]exit 0: no problems[/], {notes} note(s)  ({rep.seconds:.2f} s)")
