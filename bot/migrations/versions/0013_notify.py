"""The notify feature's outbox: ``notify_notices`` (one row per happening, unique by key)
and ``notify_sends`` (one row per notice and target alias).

Revision ID: 0013_notify
Revises: 0012_webhook_log_scan
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_notify"
down_revision = "0012_webhook_log_scan"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``notify_notices`` and ``notify_sends``."""
    op.create_table(
        "notify_notices",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(300), nullable=False, unique=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("campaign", sa.String(200)),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("url", sa.String(1000), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("routed_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_notify_notices_repo", "notify_notices", ["repo"])
    op.create_index("ix_notify_notices_state", "notify_notices", ["state"])
    op.create_table(
        "notify_sends",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("notice_id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("max_per_hour", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True)),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.Column("detail", sa.Text()),
        sa.UniqueConstraint("notice_id", "target", name="uq_notify_sends_target"),
    )
    op.create_index("ix_notify_sends_notice_id", "notify_sends", ["notice_id"])
    op.create_index("ix_notify_sends_state", "notify_sends", ["state"])
    op.create_index("ix_notify_sends_sent_at", "notify_sends", ["sent_at"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("notify_sends")
    op.drop_table("notify_notices")
