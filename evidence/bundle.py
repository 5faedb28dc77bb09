"""Loading a campaign directory: scope, receipts, status snapshots, media reports and
manifests, each validated against its model, with raw text kept so findings can name lines.

Contract shared by ``check``, the verdict engine and the bot's PR review.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from evidence.models import CampaignScope, Finding, MediaReport, Receipt, StatusSnapshot

M = TypeVar("M", bound=BaseModel)


@dataclass
class Doc(Generic[M]):
    """One validated document: ``path`` relative to the campaign root (POSIX separators),
    the parsed ``model``, and the raw ``text`` it was parsed from (for line lookup)."""

    path: str
    model: M
    text: str


@dataclass
class LoadedCampaign:
    """Everything read from one campaign directory.

    ``findings`` holds load and validation problems (each naming file, field and line);
    documents that failed validation are absent from the typed lists, never half-parsed.
    """

    root: Path
    scope: Doc[CampaignScope] | None = None
    receipts: list[Doc[Receipt]] = field(default_factory=list)
    statuses: list[Doc[StatusSnapshot]] = field(default_factory=list)
    media_reports: list[Doc[MediaReport]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
