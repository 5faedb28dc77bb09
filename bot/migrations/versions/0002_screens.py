"""Screens (per-pool queue) and the budget ledger (the /screen feature).

Revision ID: 0002_screens
Revises: 0001_inbox
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_screens"
down_revision = "0001_inbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``screens`` and ``budget_entries``."""
    op.create_table(
        "screens",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("installation_id", sa.Integer()),
        sa.Column("campaign", sa.String(200), nullable=False),
        sa.Column("campaign_path", sa.String(500), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("candidate", sa.String(200), nullable=False),
        sa.Column("track", sa.String(200), nullable=False),
        sa.Column("session_order", sa.String(64), nullable=False),
        sa.Column("pool", sa.String(200), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("device_count", sa.Integer(), nullable=False),
        sa.Column("head_sha", sa.String(40), nullable=False),
        sa.Column("head_repo", sa.String(200)),
        sa.Column("from_fork", sa.Boolean(), nullable=False),
        sa.Column("requested_by", sa.String(100), nullable=False),
        sa.Column("authorised_as", sa.String(16), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source_comment_id", sa.Integer()),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("estimate_device_s", sa.Float(), nullable=False),
        sa.Column("estimate_wall_s", sa.Float(), nullable=False),
        sa.Column("run_id", sa.Integer()),
        sa.Column("run_url", sa.String(500)),
        sa.Column("runner_name", sa.String(200)),
        sa.Column("check_run_id", sa.Integer()),
        sa.Column("status_comment_id", sa.Integer()),
        sa.Column("status_body", sa.Text()),
        sa.Column("status_posted_at", sa.DateTime(timezone=True)),
        sa.Column("result_comment_id", sa.Integer()),
        sa.Column("dispatched_at", sa.DateTime(timezone=True)),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("completed_at", sa.DateTime(timezone=True)),
        sa.Column("conclusion", sa.String(32)),
        sa.Column("verdict", sa.String(32)),
        sa.Column("detail", sa.Text()),
        sa.Column("cancelled_by", sa.String(100)),
        sa.Column("cancelled_at", sa.DateTime(timezone=True)),
        sa.Column("charged_device_s", sa.Float()),
        sa.Column("charged_wall_s", sa.Float()),
        sa.Column("summary", sa.JSON()),
    )
    op.create_index("ix_screens_request_id", "screens", ["request_id"], unique=True)
    op.create_index("ix_screens_repo", "screens", ["repo"])
    op.create_index("ix_screens_campaign", "screens", ["campaign"])
    op.create_index("ix_screens_pool", "screens", ["pool"])
    op.create_index("ix_screens_state", "screens", ["state"])
    op.create_index("ix_screens_run_id", "screens", ["run_id"])
    op.create_table(
        "budget_entries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("campaign", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("directions", sa.Integer(), nullable=False),
        sa.Column("wall_hours", sa.Float(), nullable=False),
        sa.Column("device_hours", sa.Float(), nullable=False),
        sa.Column("screen_id", sa.Integer()),
        sa.Column("by", sa.String(100), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_budget_entries_repo", "budget_entries", ["repo"])
    op.create_index("ix_budget_entries_campaign", "budget_entries", ["campaign"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("budget_entries")
    op.drop_table("screens")
