"""``campaign-bot check DIR``: validate every document and verify every manifest of a campaign
directory in one pass, and summarise its sessions per screen, track and arm.

:func:`check_campaign` returns a :class:`CheckReport` (pure data, also printed by ``--json``);
:func:`render` prints it with rich.  Exit codes: 0 clean (only P3 notes, if any), 1 problems
found (any P0, P1 or P2 finding), 2 unreadable input or bad usage (the directory itself is
missing or cannot be listed).

Warmups are shown apart and never counted: ``measured_*`` columns come from measured
requests only.  Medians are of per-session medians of measured, successful (HTTP 200, no
error) requests' client wall seconds: the independent server session is the unit, so a session with
three requests does not weigh three times.  The verdicts list is filled by the verdict engine
(:mod:`evidence.verdicts`); this module computes no verdict statistics.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
import tomllib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evidence.bundle import Doc, LoadedCampaign, load_campaign, validation_findings
from evidence.claims import Claim
from evidence.diagnostics import ProbeRow, TraceRow, probe_rows, trace_rows
from evidence.hashing import HashPool, git_blob_sha
from evidence.manifest import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    DEFAULT_MAX_FILE_BYTES,
    ExternalDigest,
    ManifestSummary,
    ProgressFn,
    VerifyResult,
    cap_findings,
    index_tree,
    verify_tree,
)
from evidence.models import CampaignScope, Finding
from evidence.scope_binding import FrozenScope
from evidence.screening import ScreeningDecision
from evidence.verdicts import TrackVerdict

SEVERITY_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}
_ATTEST = "attestation.dsse.json"  # evidence.signing.ATTESTATION_FILE (signing imports
# cryptography; check imports it only when keys are in use)
FAILING = frozenset({"P0", "P1", "P2"})
"""Severities that make ``check`` exit 1; P3 notes are printed but do not fail."""


class ArmSummary(BaseModel):
    """Sessions of one arm of one screen on one track.

    ``measured_requests`` counts measured requests only (warmups are in ``warmups``);
    ``median_client_wall_s`` is the median over sessions of each session's median measured
    client wall seconds (HTTP 200, no error); None when no measured request succeeded.
    """

    model_config = ConfigDict(defer_build=True)

    screen_id: str
    track: str
    arm: str
    candidate: str | None = None
    sessions: int
    sessions_clean: int = Field(description="Sessions that qualify (evidence.sessions: clean "
                                "lifecycle, every request answered and timed, receipt "
                                "verified).")
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


class SignatureSummary(BaseModel):
    """Which trusted keys ``check`` used and what their signatures showed.

    ``source``: ``"--trusted-keys"`` (a file given on the command line), ``"campaign"`` (the
    campaign folder's ``trusted-keys.pem``, found as the bot finds it), ``"none"`` (no keys
    file), ``"unusable"`` (a keys file that is empty or does not parse: a P1
    ``TRUSTED_KEYS_UNUSABLE``) or ``"skipped"`` (``--no-signatures``).  ``keys_file`` is the
    path, ``key_ids`` the ``sha256:`` ids of its keys.  ``verified``, ``refused`` count the
    signed bundles (``attestation.dsse.json``); ``unsigned`` the BagIt bags outside any signed
    bundle (each a P1 ``SIGNATURE_MISSING`` when keys are in use)."""

    model_config = ConfigDict(defer_build=True)

    source: str = "none"
    keys_file: str | None = None
    key_ids: list[str] = Field(default_factory=list)
    signed_bundles: int = Field(default=0, description="attestation.dsse.json files found.")
    verified: int = 0
    refused: int = 0
    unsigned: int = 0

    def lines(self) -> list[str]:
        """The summary's lines (each under 80 columns), e.g. ``signatures: 2 verified, 0
        refused, 1 unsigned bundle(s)`` then ``  keys: trusted-keys.pem, 1 key:
        sha256:1a2b3c4d5e6f...``; none without keys when nothing is signed."""
        if self.source == "skipped":
            return ["signatures: not checked (--no-signatures)"]
        if self.source == "none" and not self.signed_bundles:
            return []  # no keys and nothing signed: nothing to say
        if self.source in ("none", "unusable"):
            where = ("no trusted-keys.pem in the campaign folder" if self.source == "none"
                     else f"{self.keys_file} holds no usable key")
            return [f"signatures: not verified ({where})"]
        ids = ", ".join(k[:19] + "..." for k in self.key_ids[:1])
        more = f" (+{len(self.key_ids) - 1})" if len(self.key_ids) > 1 else ""
        return [f"signatures: {self.verified} verified, {self.refused} refused, "
                f"{self.unsigned} unsigned bundle(s)",
                f"  keys: {Path(self.keys_file or '').name}, "
                f"{_count(len(self.key_ids), 'key')}: {ids}{more}"]


class CheckReport(BaseModel):
    """``campaign-bot/check-report@1``: the result of ``campaign-bot check``."""

    schema_: str = Field(default="campaign-bot/check-report@1", alias="schema")
    root: str
    campaign: str | None = None
    campaign_file: bool = Field(
        False, description="The checked directory holds a campaign.toml (valid or not): a "
                           "campaign directory, not a bundle.")
    documents: dict[str, int] = Field(
        default_factory=dict,
        description="campaign, receipts, statuses, media_reports, json_files validated.")
    hashes_checked: int = 0
    hash_errors: int = Field(
        0, description="Mismatched + missing + unsafe + malformed entries + extra files.")
    extra_files: int = Field(0, description="Files present but not listed where they must be.")
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
        description="Screening decisions: never verdicts.")
    claims: list[Claim] = Field(
        default_factory=list, description="With --claims: every stated number and its source.")
    probes: list[ProbeRow] = Field(
        default_factory=list, description="Operator probes: listed, never verdict inputs.")
    trace_summaries: list[TraceRow] = Field(
        default_factory=list, description="Trace summaries per rank: diagnostic, never a "
        "speedup.")
    signatures: SignatureSummary = Field(
        default_factory=SignatureSummary,
        description="Which trusted keys verified which signed bundles (see SignatureSummary).")
    seconds: float = 0.0
    exit_code: int = 0

    model_config = ConfigDict(populate_by_name=True, defer_build=True)

    @property
    def problems(self) -> list[Finding]:
        """Findings that fail the check (P0-P2)."""
        return [f for f in self.findings if f.severity in FAILING]


def summarize_arms(lc: LoadedCampaign, unverified: Iterable[str] = ()) -> list[ArmSummary]:
    """Group receipts by (screen, track, arm, candidate); see :class:`ArmSummary`.
    ``sessions_clean`` counts the sessions that qualify (:mod:`evidence.sessions`; receipts
    at ``unverified`` paths do not)."""
    from evidence.sessions import session_counts

    counts = session_counts(((d.model, d.path) for d in lc.receipts), unverified)
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
            clean += counts.qualifies(r.screen_id, r.session_id)
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
                   max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
                   progress: ProgressFn | None = None,
                   workers: int | None = None,
                   base_ref: str | None = None,
                   claims_file: Path | None = None,
                   prior_noise: bool = False,
                   trusted_keys: dict[str, Any] | None = None,
                   signatures: SignatureSummary | None = None,
                   require_signed: bool = True,
                   setup_findings: Sequence[Finding] = (),
                   loaded: LoadedCampaign | None = None,
                   hasher: HashPool | None = None,
                   external_files: dict[str, Any] | None = None,
                   campaign_dir: Path | None = None,
                   frozen_scope: FrozenScope | None = None,
                   read_blob: Callable[[str], bytes | None] | None = None) -> CheckReport:
    """Load, validate and verify ``root``; see the module docstring.

    ``campaign_dir``: the campaign whose campaign.toml judges ``root``, a bundle kept outside
    it (a run's artifact, a runner's output folder); raises ValueError when that
    campaign.toml cannot be read or validated, or when ``root`` holds its own.

    :mod:`evidence.review` adds the per-track verdicts, screening decisions and review
    findings; with ``base_ref`` the FROZEN_RECEIPT_CHANGED rule, with ``claims_file`` the
    claim rules, with ``prior_noise`` the labelled prior-noise mode.

    With ``trusted_keys`` (key id -> ed25519 public key, from
    :func:`evidence.signing.load_trusted_keys`) every signed bundle under ``root`` is
    verified first (:func:`evidence.signing.signature_findings`); inside a signed bundle only
    the files its signed manifests list are read as documents, and nothing at all is read from
    a bundle that is refused.  Each BagIt bag outside every signed bundle is then a P1
    ``SIGNATURE_MISSING`` (an unsigned bundle where keys are configured); with
    ``require_signed`` (the keys were asked for by name) a directory without any signed bundle
    is P0 ``SIGNATURE_MISSING``.  ``signatures`` (where the keys came from) is filled with the
    counts and returned in the report; ``setup_findings`` (e.g. an unusable keys file the
    caller found) join the report's findings.  ``external_files`` (root-relative path ->
    :class:`evidence.manifest.ExternalFile`) names files kept outside ``root`` (Git LFS
    pointers a reader did not fetch): manifests and signed bundles report them as external,
    never as missing.  Findings of one rule in one file are capped at
    :data:`evidence.manifest.MAX_FINDINGS_PER_RULE_AND_FILE`, then counted.

    Raises ``OSError`` (NotADirectoryError, FileNotFoundError, PermissionError) only when
    ``root`` itself (or ``claims_file``) cannot be read, ``evidence.findings.BaseRefError``
    for an unreadable ``base_ref`` and ValueError for ``claims_file`` without a campaign
    scope; every other problem is a finding.

    ``loaded``: ``root`` as :func:`evidence.bundle.load_campaign` already read it (with the
    same ``max_file_bytes``), reused instead of reading every document again.

    ``frozen_scope``: the campaign's frozen scope (the default branch's ``campaign.toml``);
    without it the ``campaign.toml`` judging ``root`` stands in.  Every verified bundle's
    signed statement is held against it (:func:`evidence.scope_binding.binding_findings`):
    a bundle measured under another control, protocol or pool, or with a candidate the
    frozen scope defines otherwise, is P0 ``CONTROL_REDEFINED`` and none of its documents is
    read, so it gives no verdict.  ``read_blob(sha)``: the bytes of a git blob (the scope
    file a statement names) or None.

    ``hasher``: a :class:`evidence.hashing.HashPool` the caller opened (and closes), perhaps
    already hashing the files of ``root`` (:func:`evidence.hashing.prefetch_bag`); its
    ``progress`` and ``workers`` then apply instead of these arguments.
    """
    t0 = time.perf_counter()
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root}: does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    sig_findings: list[Finding] = []
    docs: dict[str, tuple[Any, str]] | Callable[[], dict[str, tuple[Any, str]]]
    got: list[LoadedCampaign] = []
    if trusted_keys is None and loaded is not None and loaded.index is not None:
        # a campaign the caller already loaded (the same limits, no signature restriction)
        idx = loaded.index
        got.append(loaded)
        docs = loaded.json_docs
    else:
        idx = index_tree(root)
        readable = None
        if trusted_keys is not None:  # signatures first: a refused bundle is never read
            binder = _scope_binder(root, campaign_dir, frozen_scope, read_blob,
                                   min(max_file_bytes, max_document_bytes))
            sig_findings, readable = _signed_bundles(root, trusted_keys, external_files,
                                                     idx, signatures, require_signed, binder)

        # Hashing overlaps parsing: verify_tree queues each manifest's files on the pool as
        # soon as it reads the manifest, then calls `load` (every document parsed and
        # validated on this thread while the pool hashes), then reads the integrity maps
        # `load` parsed.
        def load() -> dict[str, tuple[Any, str]]:
            got.append(load_campaign(root, max_file_bytes=max_file_bytes,
                                     max_document_bytes=max_document_bytes, index=idx,
                                     readable=readable))
            return got[0].json_docs

        docs = load
    pool_cm = (contextlib.nullcontext(hasher) if hasher is not None
               else HashPool(workers, progress=progress, beneath=root))
    with pool_cm as pool:
        vr: VerifyResult = verify_tree(root, max_file_bytes=max_file_bytes, index=idx,
                                       json_docs=docs, max_document_bytes=max_document_bytes,
                                       hasher=pool, external_files=external_files)
    lc = got[0]
    if campaign_dir is not None:
        if lc.scope is not None or "campaign.toml" in idx.files:
            raise ValueError(f"{root} holds its own campaign.toml; --campaign is for a bundle "
                             "outside its campaign")
        lc.scope = _outside_scope(campaign_dir, min(max_file_bytes, max_document_bytes))
    findings = [*setup_findings, *cap_findings(sig_findings)]
    once: set[tuple[str, str]] = set()
    for f in [*cap_findings(lc.findings), *vr.findings]:
        if f.rule in ("UNREADABLE", "FILE_TOO_LARGE"):  # the loader and the verifier both
            if (f.rule, f.path) in once:                 # meet such a file: say it once
                continue
            once.add((f.rule, f.path))
        findings.append(f)
    if not idx.files and not idx.links and not idx.special:
        findings.append(Finding(rule="EMPTY_BUNDLE", severity="P1", path=".",
                                message="the directory holds no files: nothing to check",
                                resolution="point check at a campaign or bundle directory"))
    elif lc.scope is None and not vr.manifests and not lc.receipts and not lc.statuses \
            and "campaign.toml" not in idx.files:
        # (a campaign.toml present but invalid is a campaign directory: its own findings
        # say what is wrong, not EMPTY_BUNDLE)
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
    if lc.scope is not None and campaign_dir is None:  # the inputs live beside campaign.toml
        from evidence.input_rules import input_findings
        from evidence.reference_rules import reference_findings

        findings += reference_findings(root, lc.scope.path, lc.scope.text,
                                       lc.scope.model.inputs)
        findings += input_findings(root, lc.scope.path, lc.scope.text, lc.scope.model.inputs)
        findings += _pool_findings(lc)
    # the verdict engine: consistency rules and per-track verdicts
    from evidence.review import review_check, unverified_paths

    reviewed = review_check(lc, vr.findings, base_ref=base_ref, claims_file=claims_file,
                          prior_noise=prior_noise)
    findings += cap_findings(reviewed.findings)
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.path, f.line or 0, f.rule))
    sig_summary = signatures or SignatureSummary(
        source="none" if trusted_keys is None else "--trusted-keys",
        key_ids=sorted(trusted_keys or ()))
    sig_summary.signed_bundles = sum(1 for p in idx.files if p.rsplit("/", 1)[-1] == _ATTEST)
    rep = CheckReport(
        root=str(root),
        campaign=lc.scope.model.id if lc.scope else None,
        campaign_file="campaign.toml" in idx.files,
        documents={"campaign": int(lc.scope is not None), "receipts": len(lc.receipts),
                   "statuses": len(lc.statuses), "media_reports": len(lc.media_reports),
                   "probes": len(lc.probes), "trace_summaries": len(lc.trace_summaries),
                   "json_files": len(lc.json_docs)},
        hashes_checked=vr.hashes_checked,
        hash_errors=vr.errors,
        extra_files=vr.extra,
        external_digests=len(vr.external),
        files_hashed=vr.files_hashed,
        bytes_hashed=vr.bytes_hashed,
        manifests=vr.manifests,
        external=vr.external,
        arms=summarize_arms(lc, unverified_paths([*lc.findings, *vr.findings])),
        findings=findings,
        verdicts=reviewed.verdicts,
        screening=reviewed.screening,
        claims=reviewed.claims,
        probes=probe_rows(root, lc.probes),
        trace_summaries=trace_rows(root, lc.trace_summaries),
        signatures=sig_summary,
    )
    rep.exit_code = 1 if rep.problems else 0
    rep.seconds = round(time.perf_counter() - t0, 3)
    return rep


def _pool_findings(lc: LoadedCampaign) -> list[Finding]:
    """``RUNNER_LABELS_EMPTY`` (P1) when ``[pool] runner_labels`` is absent or empty: the
    screen workflow's ``runs-on`` would name no self-hosted runner, so the bot cannot
    dispatch a screen (GitHub Actions, "Choosing the runner for a job": a job with no runner
    label matches no self-hosted runner of the pool)."""
    from evidence.lines import line_of

    assert lc.scope is not None
    if lc.scope.model.pool.runner_labels:
        return []
    return [Finding(
        rule="RUNNER_LABELS_EMPTY", severity="P1", path=lc.scope.path,
        line=line_of(lc.scope.text, ("pool", "runner_labels"), fmt="toml"),
        field="pool.runner_labels",
        message="no runner labels: the bot cannot dispatch a screen to this pool's "
                "self-hosted runner",
        resolution='list the labels of the pool\'s runner, e.g. runner_labels = '
                   '["self-hosted", "ascend910b1", "x4"]')]


def _scope_binder(root: Path, campaign_dir: Path | None, frozen: FrozenScope | None,
                  read_blob: Callable[[str], bytes | None] | None, limit: int
                  ) -> Callable[[str, dict[str, Any]], list[Finding]] | None:
    """The frozen-scope check of one verified bundle (root-relative folder, signed
    predicate) -> findings, or None when there is no scope to hold bundles against (a bare
    bundle checked without ``--campaign``).  Reference: ``frozen``, else the campaign.toml
    judging ``root``.  A scope file named by a statement is looked for in the bundle
    (:data:`evidence.scope_binding.SCOPE_FILE`), then as that campaign.toml, then through
    ``read_blob``; files over ``limit`` bytes are not read."""
    from evidence.scope_binding import SCOPE_FILE, binding_findings

    def small(path: Path) -> bytes | None:
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > limit:
                return None
            return path.read_bytes()
        except OSError:
            return None

    own_file = (campaign_dir or root) / "campaign.toml"
    own = small(own_file)
    ref = frozen if frozen is not None else (
        FrozenScope(label="the campaign.toml checked", data=own) if own is not None else None)
    if ref is None:
        return None
    reference = ref

    def bind(bundle: str, predicate: dict[str, Any]) -> list[Finding]:
        folder = root if bundle == "." else root / bundle

        def read(sha: str) -> bytes | None:
            for data in (small(folder / SCOPE_FILE), own):
                if data is not None and git_blob_sha(data) == sha:
                    return data
            return read_blob(sha) if read_blob is not None else None

        return binding_findings(bundle, predicate, reference, read)

    return bind


def _signed_bundles(root: Path, keys: dict[str, Any], external_files: dict[str, Any] | None,
                    idx: Any, summary: SignatureSummary | None, require_signed: bool,
                    binder: Callable[[str, dict[str, Any]], list[Finding]] | None = None,
                    ) -> tuple[list[Finding], Callable[[str], bool]]:
    """Signature findings for every signed bundle under ``root``, and the loader's filter:
    a root-relative path inside a signed bundle (the innermost one holding it) is readable
    only when that bundle verifies, ``binder`` (see :func:`_scope_binder`) finds nothing
    against its signed statement, and its signed manifests list the path.  Adds a P1
    ``SIGNATURE_MISSING`` per BagIt bag (``bagit.txt`` in ``idx``) outside every signed
    bundle, drops the P0 "no signed bundle" unless ``require_signed``, and fills
    ``summary``'s counts."""
    from evidence.signing import ATTESTATION_FILE, BundleVerification, signature_findings

    results: list[BundleVerification] = []
    found = signature_findings(root, keys, results, external_files=external_files)
    if not results and not require_signed:
        found = [f for f in found if f.rule != "SIGNATURE_MISSING"]
    signed = [r.root.relative_to(root).as_posix() for r in results]
    bags = sorted(p.rsplit("/", 1)[0] if "/" in p else "." for p in idx.files
                  if p == "bagit.txt" or p.endswith("/bagit.txt"))
    unsigned = [b for b in bags if not any(
        s == "." or b == s or b.startswith(s + "/") for s in signed)]
    for b in unsigned:
        found.append(Finding(
            rule="SIGNATURE_MISSING", severity="P1",
            path="bagit.txt" if b == "." else f"{b}/bagit.txt",
            message=f"an unsigned bundle (no {ATTESTATION_FILE}) where trusted keys are "
                    "configured: the bot refuses it, and nothing shows who produced it",
            resolution="re-run the screen on a runner with a signing key (runner guide, "
                       "signing keys), or check with --no-signatures to skip signatures"))
    if summary is not None:
        summary.verified = sum(r.ok for r in results)
        summary.refused = len(results) - summary.verified
        summary.unsigned = len(unsigned)
    allowed: list[tuple[str, set[str] | None]] = []
    for res in results:
        rel = res.root.relative_to(root).as_posix()
        pre = "" if rel == "." else f"{rel}/"
        bound = binder(rel, res.predicate) if binder is not None and res.ok else []
        found += bound
        allowed.append((pre, {pre + p for p in res.covered()} if res.ok and not bound
                        else None))
    allowed.sort(key=lambda a: -len(a[0]))  # innermost bundle first

    def readable(rel: str) -> bool:
        for pre, ok in allowed:
            if rel.startswith(pre):
                return ok is not None and rel in ok
        return True

    return found, readable


# ------------------------------------------------------------------------------- render


def _fmt_s(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _count(n: int, word: str, plural: str | None = None) -> str:
    """``"1 error"``, ``"0 errors"``, ``"2 errors"``: ``n`` and ``word`` in the number it
    needs (``plural`` where adding ``s`` is wrong, e.g. ``"hashes"``)."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _integrity_counts(rep: CheckReport) -> str:
    """``checked N hashes in M manifests, E errors (incl. X extra files)``, each noun in the
    number its count needs."""
    extra = f" (incl. {_count(rep.extra_files, 'extra file')})" if rep.extra_files else ""
    return (f"checked {_count(rep.hashes_checked, 'hash', 'hashes')} in "
            f"{_count(len(rep.manifests), 'manifest')}, {_count(rep.hash_errors, 'error')}{extra}")


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


SUMMARY_LINES = 24
"""The default summary fits a terminal of this many lines (and the console's width, 80 by
default): the integrity line, finding counts by severity, the verdict table, the first
findings with file:line, and a last line saying how to see everything."""
SUMMARY_VERDICT_ROWS = 6
"""At most this many verdict rows in the summary (beyond it, a line counts the rest)."""

SEVERITY_STYLE = {"P0": "red", "P1": "red", "P2": "yellow", "P3": "dim"}


def _loc(f: Finding) -> str:
    """``path:line`` (or the path alone) of a finding, relative to the checked directory."""
    return f.path + (f":{f.line}" if f.line else "")


def _line(console: Any, text: Any, *, crop: bool = True) -> None:
    """Print exactly one line: too long a line is cut with an ellipsis (``crop``) or, for a
    ``file:line`` that must stay whole, printed whole past the width (never split)."""
    if crop:
        console.print(text, no_wrap=True, overflow="ellipsis", crop=True, soft_wrap=False)
    else:
        console.print(text, soft_wrap=True)


def _result_line(rep: CheckReport) -> str:
    n = len(rep.problems)
    notes = len(rep.findings) - n
    if n:
        return f"[red]exit 1: {n} problem(s)[/], {notes} note(s)  ({rep.seconds:.2f} s)"
    return f"[green]exit 0: no problems[/], {notes} note(s)  ({rep.seconds:.2f} s)"


def _outside_scope(campaign_dir: Path, limit: int) -> Doc[CampaignScope]:
    """The validated campaign.toml of ``campaign_dir`` as a document (its path as given),
    for judging a bundle outside its campaign.  Raises ValueError naming the file, and the
    field and line of its first problem."""
    from pydantic import ValidationError


    toml = campaign_dir / "campaign.toml"
    try:
        if toml.stat().st_size > limit:
            raise ValueError(f"--campaign {toml}: larger than {limit} bytes")
        text = toml.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"--campaign {toml}: {why}") from None
    try:
        data = tomllib.loads(text)
        scope = CampaignScope.model_validate(data, strict=True)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--campaign {toml}: not valid TOML: {exc}") from None
    except ValidationError as exc:
        first = validation_findings(exc, "campaign.toml", text, fmt="toml")[0]
        raise ValueError(f"--campaign {toml}:{first.line or '-'}: {first.message} (check the "
                         "campaign itself for every problem)") from None
    return Doc(str(toml), scope, text)


def _title(rep: CheckReport) -> str:
    """The first word of the summary: ``campaign ID``; ``campaign (campaign.toml invalid)``
    for a campaign directory whose campaign.toml does not load; else ``bundle``."""
    from rich.markup import escape

    if rep.campaign:
        return f"campaign [bold]{escape(rep.campaign)}[/]"
    return "campaign (campaign.toml invalid)" if rep.campaign_file else "bundle"


def _toml_state(rep: CheckReport) -> str:
    """``valid``, ``invalid`` or ``absent``: the checked directory's campaign.toml."""
    return "valid" if rep.documents.get("campaign") else (
        "invalid" if rep.campaign_file else "absent")


def render(rep: CheckReport, console: Any, *, details: bool = False) -> None:
    """Print ``rep`` with rich: by default the one-screen summary (:func:`render_summary`),
    with ``details`` every table and every finding (:func:`render_details`)."""
    if details:
        render_details(rep, console)
    else:
        render_summary(rep, console)


def render_summary(rep: CheckReport, console: Any) -> None:
    """At most :data:`SUMMARY_LINES` lines, none wider than the console (80 columns unless the
    terminal or ``COLUMNS`` says otherwise): the campaign, integrity, documents, finding
    counts by severity, the verdict table (one line per row), as many findings as fit (each
    ``severity rule file:line`` then its message), the result line and how to see more.  A
    ``file:line`` is never cut or split: when it does not fit beside the rule it gets a line
    of its own."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from evidence.review import VERDICT_STYLE

    width = console.width
    used = 0

    def line(text: Any, crop: bool = True) -> None:
        nonlocal used
        _line(console, text, crop=crop)
        used += 1

    line(f"{_title(rep)}  ({escape(rep.root)})")
    line(f"integrity: {_integrity_counts(rep)}; {rep.external_digests} external unverifiable")
    for sig_line in rep.signatures.lines():
        line(escape(sig_line))
    d = rep.documents
    line(f"documents: campaign.toml {_toml_state(rep)}, "
         f"{d.get('receipts', 0)} receipts, {d.get('statuses', 0)} status snapshots, "
         f"{d.get('media_reports', 0)} media reports"
         + (f", {d['probes']} operator probes" if d.get("probes") else "")
         + (f", {d['trace_summaries']} trace summaries" if d.get("trace_summaries") else ""))
    counts = {s: sum(f.severity == s for f in rep.findings) for s in SEVERITY_ORDER}
    line("findings: " + ", ".join(f"[{SEVERITY_STYLE[s]}]{s}[/] {n}" for s, n in counts.items())
         + "  (P0-P2 fail the check; P3 are notes)")
    if rep.claims:
        traced = sum(1 for c in rep.claims if c.traced_to)
        summed = sum(1 for c in rep.claims if c.summed)
        setting = sum(1 for c in rep.claims if c.setting_as_result)
        line(f"claims traced: {traced} of {len(rep.claims)} "
             f"({len(rep.claims) - traced - summed - setting} untraceable, "
             f"{setting} setting as result, {summed} summed gains)")
    line("")
    if rep.verdicts:
        t = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 1, 0, 0),
                  header_style="bold")
        for c in ("track", "candidate", "verdict", "ratio", "m v n", "deciding reason"):
            t.add_column(c, no_wrap=True, overflow="ellipsis",
                         justify="right" if c in ("ratio", "m v n") else "left")
        rows = list(rep.verdicts)
        shown = rows if len(rows) <= SUMMARY_VERDICT_ROWS else rows[:SUMMARY_VERDICT_ROWS - 1]
        for v in shown:
            dec = v.deciding
            more = len(dict.fromkeys(v.codes)) - 1
            why = (dec.code if dec else "") + (f" +{more}" if dec and more > 0 else "")
            t.add_row(escape(v.track), escape(v.candidate or "(control only)"),
                      f"[{VERDICT_STYLE[v.verdict]}]{v.shown}[/]",
                      "—" if v.ratio is None else f"{v.ratio:.3f}", f"{v.m} v {v.n}",
                      escape(why))
        console.print(t, no_wrap=True, overflow="ellipsis", crop=True)
        used += 1 + len(shown)
        if len(shown) < len(rows):
            line(f"... {len(rows) - len(shown)} more verdict row(s)")
    else:
        line("verdicts: none (no valid campaign.toml: nothing to judge)")
    footer = 3  # blank, result, how to see more
    if rep.findings:
        line("")
        line("first findings, most severe first:")
        shown_f = 0
        for f in rep.findings:
            head = f"{f.severity} {f.rule}  {_loc(f)}"
            cost = 2 if Text(head).cell_len <= width else 3
            if used + cost + footer > SUMMARY_LINES:
                break
            style = SEVERITY_STYLE[f.severity]
            if cost == 2:
                line(f"[{style}]{f.severity}[/] {escape(f.rule)}  {escape(_loc(f))}", crop=False)
            else:
                line(f"[{style}]{f.severity}[/] {escape(f.rule)}")
                line(Text("  " + _loc(f)), crop=False)
            line(Text("    " + f.message, style="dim"))
            shown_f += 1
        rest = len(rep.findings) - shown_f
    else:
        rest = 0
    line("")
    line(_result_line(rep))
    lead = f"{rest} more finding(s); to" if rest else "To"
    line(f"{lead} see every table and finding add --details (or --json)")


def render_details(rep: CheckReport, console: Any) -> None:
    """Print ``rep`` whole: counts, manifests, sessions per arm, verdicts, screening, claims,
    every finding with its field and resolution, and the result line.  Paths are printed
    whole, on lines rather than in narrow table cells, so a ``file:line`` is never split."""
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console.print(f"{_title(rep)}  ({escape(rep.root)})")
    d = rep.documents
    console.print(
        f"documents: campaign.toml {_toml_state(rep)}, "
        f"{d.get('receipts', 0)} receipts, {d.get('statuses', 0)} status snapshots, "
        f"{d.get('media_reports', 0)} media reports valid"
        + (f", {d['probes']} operator probes" if d.get("probes") else "")
        + (f", {d['trace_summaries']} trace summaries" if d.get("trace_summaries") else ""))
    console.print(
        f"integrity: {_integrity_counts(rep)}; {_count(rep.files_hashed, 'file')}, "
        f"{_bytes(rep.bytes_hashed)} hashed; {rep.external_digests} external digests "
        "recorded, not verifiable here")
    console.print(escape((rep.signatures.lines() or [
        "signatures: none to verify (no trusted keys, no signed bundle)"])[0]), soft_wrap=True)
    if rep.signatures.key_ids:
        console.print(f"  keys of {escape(rep.signatures.keys_file or '-')}: "
                      + ", ".join(rep.signatures.key_ids), soft_wrap=True)
    if rep.manifests:
        console.print("[bold]manifests[/] (entries: verified, mismatched, missing, extra, "
                      "external, other; then the kind and the manifest)")
        for m in rep.manifests:
            counts = (f"{m.entries:>5}: {m.verified:>5} {m.mismatched:>3} {m.missing:>3} "
                      f"{m.extra:>3} {m.external:>3} {m.unsafe + m.malformed + m.duplicates:>3}")
            _line(console, Text(f"  {counts}  {m.kind:<10} {m.path}"), crop=False)
    if rep.arms:
        t = Table(title="sessions per screen, track and arm (warmups never counted; clean = "
                        "qualifying sessions / sessions: clean lifecycle, every request "
                        "answered and timed)", title_justify="left")
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
    from evidence.diagnostics import render_rows
    from evidence.review import render_review

    render_rows(rep.probes, rep.trace_summaries, console)

    render_review(rep.verdicts, rep.screening, rep.claims, console)
    if rep.findings:
        console.print("[bold]findings[/] (severity, rule, file:line, field; what is wrong; "
                      "what resolves it)")
        for f in rep.findings:
            style = SEVERITY_STYLE[f.severity]
            field = f"  ({escape(f.field)})" if f.field else ""
            _line(console, f"[{style}]{f.severity}[/] {escape(f.rule)}  {escape(_loc(f))}"
                  f"{field}", crop=False)
            console.print(Padding(Text(f.message), (0, 0, 0, 4)))
            if f.resolution:
                console.print(Padding(Text("fix: " + f.resolution, style="dim"), (0, 0, 0, 4)))
    console.print(_result_line(rep))
