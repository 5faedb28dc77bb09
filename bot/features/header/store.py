"""Tables of the campaign status header on :class:`bot.database.Base`; created by the
Alembic revision ``0008_campaign_headers``.

* ``campaign_headers``: one row per campaign (repository + campaign directory): its issue,
  its evidence paths (``evidence_paths`` of campaign.toml, relative to the directory),
  whether the bot has inserted a header block there (so missing markers mean a human deleted
  them), when the bot said so, the last input key (content hash of everything the header is
  computed from) and the last rendered header, and the evidence reference (commit SHA and time
  from the last push that touched the campaign, tree SHA read).
* ``campaign_header_history``: one row per header write (and per missing-marker notice), for
  ``/campaign history``: time, trigger, delivery id, evidence SHA, header text and a one-line
  summary of what changed.
* ``campaign_candidate_prs``: open and closed PRs with their head SHA and which campaign
  directories their files touch (read once per head SHA), so a refresh needs no PR reads.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, DateTime, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from bot.database import Base


class CampaignHeader(Base):
    """One campaign's header state (see module docstring)."""

    __tablename__ = "campaign_headers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(300), nullable=False)
    path: Mapped[str] = mapped_column(String(500), nullable=False)
    campaign_id: Mapped[str] = mapped_column(String(200), nullable=False)
    issue: Mapped[int] = mapped_column(Integer, nullable=False)
    default_branch: Mapped[str] = mapped_column(String(200), nullable=False, default="main")
    evidence_paths: Mapped[list[Any]] = mapped_column(JSON, nullable=False, default=list)
    inserted: Mapped[bool] = mapped_column(nullable=False, default=False)
    markers_notice_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    input_key: Mapped[str | None] = mapped_column(String(64))
    header_text: Mapped[str | None] = mapped_column(Text)
    evidence_sha: Mapped[str | None] = mapped_column(String(64))
    evidence_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    evidence_tree: Mapped[str | None] = mapped_column(String(64))
    refreshed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    written_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("repo", "path", name="uq_campaign_headers_repo_path"),
        Index("ix_campaign_headers_repo_issue", "repo", "issue"),
    )


class HeaderChange(Base):
    """One header write or missing-marker notice (``kind`` ``write`` | ``markers-missing``)."""

    __tablename__ = "campaign_header_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(300), nullable=False)
    issue: Mapped[int] = mapped_column(Integer, nullable=False)
    campaign_id: Mapped[str] = mapped_column(String(200), nullable=False)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    trigger: Mapped[str] = mapped_column(String(200), nullable=False)
    delivery_id: Mapped[str | None] = mapped_column(String(200))
    evidence_sha: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text, nullable=False)
    header_text: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_campaign_header_history_issue", "repo", "issue", "id"),)


class CandidatePR(Base):
    """A PR of a campaign repository: head SHA and the campaign directories it touches."""

    __tablename__ = "campaign_candidate_prs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(300), nullable=False)
    number: Mapped[int] = mapped_column(Integer, nullable=False)
    title: Mapped[str] = mapped_column(String(500), nullable=False, default="")
    head_sha: Mapped[str] = mapped_column(String(64), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False, default="open")
    touches: Mapped[list[Any]] = mapped_column(JSON, nullable=False, default=list)
    files_sha: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    __table_args__ = (UniqueConstraint("repo", "number", name="uq_campaign_candidate_prs"),)
