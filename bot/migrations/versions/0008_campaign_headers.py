"""Campaign status header: header state, header history, candidate PRs (the header feature).

Revision ID: 0008_campaign_headers
Revises: 0002_screens
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_campaign_headers"
down_revision = "0002_screens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``campaign_headers``, ``campaign_header_history``, ``campaign_candidate_prs``."""
    op.create_table(
        "campaign_headers",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("path", sa.String(500), nullable=False),
        sa.Column("campaign_id", sa.String(200), nullable=False),
        sa.Column("issue", sa.Integer(), nullable=False),
        sa.Column("default_branch", sa.String(200), nullable=False),
        sa.Column("evidence_paths", sa.JSON(), nullable=False),
        sa.Column("inserted", sa.Boolean(), nullable=False),
        sa.Column("markers_notice_at", sa.DateTime(timezone=True)),
        sa.Column("input_key", sa.String(64)),
        sa.Column("header_text", sa.Text()),
        sa.Column("evidence_sha", sa.String(64)),
        sa.Column("evidence_at", sa.DateTime(timezone=True)),
        sa.Column("evidence_tree", sa.String(64)),
        sa.Column("refreshed_at", sa.DateTime(timezone=True)),
        sa.Column("written_at", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("repo", "path", name="uq_campaign_headers_repo_path"),
    )
    op.create_index("ix_campaign_headers_repo_issue", "campaign_headers", ["repo", "issue"])
    op.create_table(
        "campaign_header_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("issue", sa.Integer(), nullable=False),
        sa.Column("campaign_id", sa.String(200), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("trigger", sa.String(200), nullable=False),
        sa.Column("delivery_id", sa.String(200)),
        sa.Column("evidence_sha", sa.String(64)),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("header_text", sa.Text()),
    )
    op.create_index(
        "ix_campaign_header_history_issue", "campaign_header_history", ["repo", "issue", "id"]
    )
    op.create_table(
        "campaign_candidate_prs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(300), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("head_sha", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("touches", sa.JSON(), nullable=False),
        sa.Column("files_sha", sa.String(64)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "number", name="uq_campaign_candidate_prs"),
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_table("campaign_candidate_prs")
    op.drop_index("ix_campaign_header_history_issue", table_name="campaign_header_history")
    op.drop_table("campaign_header_history")
    op.drop_index("ix_campaign_headers_repo_issue", table_name="campaign_headers")
    op.drop_table("campaign_headers")
