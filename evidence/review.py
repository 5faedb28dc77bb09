"""One call for a whole review: verdicts, screening decisions, findings and traced claims of
a campaign (issue 3).  Used by ``campaign-bot check`` and by the bot's PR review.

``review(loaded)`` takes a :class:`~evidence.bundle.LoadedCampaign`; ``review_evidence(ev)``
takes an :class:`~evidence.verdicts.Evidence` built from plain lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from evidence.claims import Claim, check_claims
from evidence.findings import frozen_receipt_changed, review_findings, sort_findings
from evidence.models import Finding
from evidence.screening import ScreeningDecision, screen_decisions
from evidence.verdicts import Evidence, TrackVerdict, judge

if TYPE_CHECKING:
    from evidence.bundle import LoadedCampaign

UNVERIFIED_RULES = frozenset({
    "MANIFEST_MISMATCH", "UNREADABLE", "FILE_TOO_LARGE", "SYMLINK_ESCAPES", "NOT_REGULAR_FILE",
})
"""Load/manifest finding rules (issue 2) that leave a file unverified: a receipt named by one
of these does not qualify for a verdict."""


class ReviewResult(BaseModel):
    """Verdicts (per track and candidate), screening decisions (never verdicts), findings of
    the issue 3 rules and, with ``--claims``, every claim with what it traced to."""

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
    """``(verdicts, findings)`` of a loaded campaign; the findings are the issue 3 rules only
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
        claims = (str(claims_file), Path(claims_file).read_text(encoding="utf-8"))
    return review_evidence(ev, base_ref=base_ref, claims=claims, prior_noise=prior_noise)
