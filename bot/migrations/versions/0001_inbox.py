"""Delivery inbox and handler runs.

Revision ID: 0001_inbox
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_inbox"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``deliveries`` and ``handler_runs``."""
    op.create_table(
        "deliveries",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("delivery_id", sa.String(200), nullable=False, unique=True),
        sa.Column("event", sa.String(100), nullable=False),
        sa.Column("action", sa.String(100)),
        sa.Column("repo", sa.String(300)),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True)),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text()),
    )
    op.create_index("ix_deliveries_status_key_seq", "deliveries", ["status", "key", "seq"])
    op.create_table(
        "handler_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "delivery_seq", sa.Integer(),
            sa.ForeignKey("deliveries.seq", ondelete="CASCADE"), nullable=False,
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("handler", sa.String(300), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_handler_runs_delivery_seq", "handler_runs", ["delivery_seq"])


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("handler_runs")
    op.drop_table("deliveries")
