"""One call for a whole review: verdicts, screening decisions, findings and traced claims of
a campaign.  Used by ``campaign-bot check`` and by the bot's PR review.

``review(loaded)`` takes a :class:`~evidence.bundle.LoadedCampaign`; ``review_evidence(ev)``
takes an :class:`~evidence.verdicts.Evidence` built from plain lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from evidence.claims import Claim, check_claims
from evidence.findings import (
    frozen_receipt_changed,
    lifecycle_findings,
    request_findings,
    review_findings,
    sort_findings,
)
from evidence.models import Finding
from evidence.screening import ScreeningDecision, screen_decisions
from evidence.verdicts import Evidence, ReceiptIn, TrackVerdict, judge

if TYPE_CHECKING:
    from evidence.bundle import LoadedCampaign

UNVERIFIED_RULES = frozenset({
    "MANIFEST_MISMATCH", "UNREADABLE", "FILE_TOO_LARGE", "SYMLINK_ESCAPES", "NOT_REGULAR_FILE",
})
"""Load/manifest finding rules that leave a file unverified: a receipt named by one
of these does not qualify for a verdict."""


class ReviewResult(BaseModel):
    """Verdicts (per track and candidate), screening decisions (never verdicts), findings of
    the :mod:`evidence.findings` rules and, with ``--claims``, every claim with what it traced
    to."""

    model_config = ConfigDict(defer_build=True)

    verdicts: list[TrackVerdict] = Field(default_factory=list)
    screening: list[ScreeningDecision] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    claims: list[Claim] = Field(default_factory=list)


def review_evidence(
    ev: Evidence,
    *,
    base_ref: str | None = None,
    claims: tuple[str, str] | None = None,
    prior_noise: bool = False,
) -> ReviewResult:
    """Verdicts, screening decisions and findings for ``ev``.

    ``base_ref`` (needs ``ev.root`` in a git work tree) adds FROZEN_RECEIPT_CHANGED;
    ``claims`` is ``(path shown in findings, prose text)``.  Raises
    :class:`evidence.findings.BaseRefError` for an unreadable ``base_ref``.
    """
    verdicts = judge(ev, prior_noise=prior_noise)
    screening = screen_decisions(ev)
    findings = review_findings(ev, verdicts, screening)
    traced: list[Claim] = []
    if base_ref is not None:
        if ev.root is None:
            from evidence.findings import BaseRefError

            raise BaseRefError("--base needs a campaign directory inside a git work tree")
        findings += frozen_receipt_changed(ev.root, base_ref)
    if claims is not None:
        traced, claim_findings = check_claims(claims[0], claims[1], ev, verdicts)
        findings += claim_findings
    return ReviewResult(verdicts=verdicts, screening=screening,
                        findings=sort_findings(findings), claims=traced)


def unverified_paths(findings: Iterable[Finding]) -> set[str]:
    """Paths that load/manifest findings mark as not verified (see :data:`UNVERIFIED_RULES`)."""
    return {f.path for f in findings if f.rule in UNVERIFIED_RULES}


def review(
    loaded: LoadedCampaign,
    *,
    base_ref: str | None = None,
    claims_file: Path | None = None,
    prior_noise: bool = False,
    extra_findings: Sequence[Finding] = (),
) -> tuple[list[TrackVerdict], list[Finding]]:
    """``(verdicts, findings)`` of a loaded campaign; the findings are the review rules only
    (the loader's own findings stay in ``loaded.findings``).  See :func:`review_full`."""
    res = review_full(loaded, base_ref=base_ref, claims_file=claims_file,
                      prior_noise=prior_noise, extra_findings=extra_findings)
    return res.verdicts, res.findings


def review_full(
    loaded: LoadedCampaign,
    *,
    base_ref: str | None = None,
    claims_file: Path | None = None,
    prior_noise: bool = False,
    extra_findings: Sequence[Finding] = (),
) -> ReviewResult:
    """The full :class:`ReviewResult` of a loaded campaign.

    ``extra_findings`` (e.g. manifest verification findings) mark unverified receipts, as do
    ``loaded.findings``.  Raises ValueError when the campaign has no valid scope, OSError when
    ``claims_file`` cannot be read, and :class:`evidence.findings.BaseRefError`.
    """
    unverified = unverified_paths([*loaded.findings, *extra_findings])
    ev = Evidence.from_loaded(loaded, unverified)
    claims = None
    if claims_file is not None:
        raw = Path(claims_file).read_bytes()
        try:
            claims = (str(claims_file), raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            raise ValueError(f"--claims {claims_file}: not UTF-8 text (byte {e.start}, "
                             f"line {line})") from None
    res = review_evidence(ev, base_ref=base_ref, claims=claims, prior_noise=prior_noise)
    probe_fs, explained = _probe_rules(loaded, res.claims, claims)
    kept = [f for f in res.findings if not (
        f.rule in ("UNTRACEABLE_CLAIM", "SUMMED_GAINS", "CLAIM_CITES_TARGET_AS_RESULT")
        and claims is not None
        and f.path == claims[0] and any(f.line == ln and repr(t) in f.message
                                        for ln, t in explained))]
    res.findings = sort_findings([*kept, *_untyped_stale(loaded), *probe_fs])
    return res


def _probe_rules(loaded: LoadedCampaign, traced: Sequence[Claim],
                 claims: tuple[str, str] | None) -> tuple[list[Finding], set[tuple[int, str]]]:
    """PROBE_NONEXACT_LOSSLESS and PROBE_GAIN_AS_MODEL_GAIN (:mod:`evidence.probe_rules`);
    probes are never inputs to a verdict."""
    from evidence.probe_rules import probe_findings

    if not loaded.probes:
        return [], set()
    scope = loaded.scope.model if loaded.scope else None
    lossless = [t.id for t in scope.tracks if t.quality_mode == "lossless"] if scope else []
    return probe_findings([(d.model, d.path, d.text) for d in loaded.probes],
                          lossless_tracks=lossless, receipts=[d.model for d in loaded.receipts],
                          claims=traced, claims_path=claims[0] if claims else None,
                          claims_text=claims[1] if claims else "")


def _untyped_stale(loaded: LoadedCampaign) -> list[Finding]:
    """STALE_STATUS for status files without our schema (:mod:`evidence.untyped_status`)."""
    from evidence.untyped_status import untyped_stale_findings

    return untyped_stale_findings(loaded.json_docs,
                                  [(d.model, d.path) for d in loaded.receipts],
                                  loaded.scope.model.id if loaded.scope else None)


def review_check(
    loaded: LoadedCampaign,
    verify_findings: Sequence[Finding] = (),
    *,
    base_ref: str | None = None,
    claims_file: Path | None = None,
    prior_noise: bool = False,
) -> ReviewResult:
    """The review that ``campaign-bot check`` adds to integrity.  Without a valid scope there
    are no verdicts; ``base_ref`` still works, ``claims_file`` raises ValueError (nothing to
    trace numbers to)."""
    if loaded.scope is None:
        if claims_file is not None:
            raise ValueError("--claims needs a valid campaign.toml: claims trace to its "
                             "receipts and verdicts")
        found = frozen_receipt_changed(Path(loaded.root), base_ref) if base_ref else []
        # A bare runner bundle has receipts but no scope: no verdict, but the rules that
        # need no scope still run, so a failed lifecycle or request is never exit 0.
        items = [ReceiptIn(d.model, d.path, d.text) for d in loaded.receipts]
        found += lifecycle_findings(items) + request_findings(items) + _untyped_stale(loaded)
        found += _probe_rules(loaded, [], None)[0]
        return ReviewResult(findings=sort_findings(found))
    return review_full(loaded, base_ref=base_ref, claims_file=claims_file,
                       prior_noise=prior_noise, extra_findings=verify_findings)


# ----------------------------------------------------------------------------- render

VERDICT_STYLE = {"SUPPORTED": "green", "FAILED": "red", "INCONCLUSIVE": "yellow",
                 "EQUIVALENT": "green", "NOT SHOWN": "yellow"}


def _r(x: float | None, nd: int = 3) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def render_review(verdicts: Sequence[TrackVerdict], screening: Sequence[ScreeningDecision],
                  claims: Sequence[Claim], console: Any) -> None:
    """Print the verdicts table with each verdict's reasons below it, the screening table
    (labelled: not verdicts) and, when claims were checked, every claim with what it traced
    to, with rich.  Sentences that may name files are printed as wrapped lines, not table
    cells, so a path is never folded inside a cell."""
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    if verdicts:
        t = Table(title="verdicts per track and candidate (session medians; exact "
                  "distribution-free rule, one-sided alpha 0.05)", title_justify="left")
        for c in ("track", "candidate", "verdict", "m v n", "ratio (HL)", "exact bounds",
                  "spread", "pairs vs theta0", "more pairs"):
            t.add_column(c, overflow="fold",
                         justify="right" if c in ("m v n", "spread", "more pairs") else "left")
        for v in verdicts:
            bounds = (f"[{_r(v.lower)}, {_r(v.upper)}] @{v.confidence:.1%}"
                      if v.confidence is not None else
                      (f"none (best {v.best_confidence:.1%})"
                       if v.best_confidence is not None else "—"))
            contrary = ("—" if v.pairs_at_or_above_theta0 is None else
                        f">= {v.pairs_at_or_above_theta0}, <= {v.pairs_at_or_below_theta0} "
                        f"of {v.pairs}; u {'—' if v.u is None else v.u}")
            verdict = f"[{VERDICT_STYLE[v.verdict]}]{v.shown}[/]"
            if v.regression:
                verdict += " [red]REGRESSION[/]"
            t.add_row(escape(v.track), escape(v.candidate or "(control only)"), verdict,
                      f"{v.m} v {v.n}", _r(v.ratio, 4), bounds,
                      _r(v.control_spread, 4) if v.m > 1 else "—",
                      contrary, "—" if v.more_pairs_needed is None else str(v.more_pairs_needed))
        console.print(t)
        console.print("[bold]why[/] (the deciding reason first)")
        for v in verdicts:
            console.print(Text(f"{v.track} / {v.candidate or '(control only)'}: {v.shown}"))
            dec = v.deciding
            ordered = ([dec] if dec else []) + [r for r in v.reasons if r is not dec]
            for r in ordered:
                console.print(Padding(Text(f"{r.code}: {r.text}"), (0, 0, 0, 4)))
        for v in verdicts:
            tails = [x for x in v.tail if x.status == "ok"]
            if tails:
                console.print(f"tail {escape(v.track)} {escape(v.candidate or '')}: " + "; ".join(
                    f"{x.arm} p95 {x.p95_s:.3f} s (95 % upper bound {x.p95_upper_bound_s:.3f} s, "
                    f"{x.measured_requests} requests)" for x in tails))
            if v.prior_noise is not None:
                p = v.prior_noise
                console.print(
                    f"[dim]{escape(p.label)}[/] {escape(v.track)} {escape(v.candidate or '')}: "
                    f"{p.decision}, ratio {p.ratio:.4f} [{p.lower:.4f}, {p.upper:.4f}] "
                    f"from {p.diffs} historical differences")
        if any(x.status == "underpowered" for v in verdicts for x in v.tail):
            console.print("tail: underpowered (fewer than 59 measured requests per arm; no "
                          "p95 is shown)")
    if screening:
        t = Table(title="screening decisions (not verdicts)", title_justify="left")
        for c in ("screen", "track", "candidate", "decision", "first pair", "reason"):
            t.add_column(c, overflow="fold")
        for d in screening:
            t.add_row(escape(d.screen_id), escape(d.track), escape(d.candidate), d.decision,
                      _r(d.first_pair_ratio) + ("x" if d.first_pair_ratio else ""),
                      escape(d.reason))
        console.print(t)
    if claims:
        console.print("[bold]claims traced[/] (line: claim -> source)")
        for cl in claims:
            src = (escape(cl.traced_to) if cl.traced_to else
                   f"[red]setting stated as result[/] ({escape(cl.setting_as_result)})"
                   if cl.setting_as_result else
                   "[red]summed gain[/]" if cl.summed else "[red]untraceable[/]")
            console.print(f"  line {cl.line}: {escape(cl.text.strip())} -> {src}", soft_wrap=True)
