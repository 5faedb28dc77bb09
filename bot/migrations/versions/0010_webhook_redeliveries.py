"""Missed webhook deliveries that the bot asked GitHub to redeliver (the inbox's recovery job).

Revision ID: 0010_webhook_redeliveries
Revises: 0009_screen_commands
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_webhook_redeliveries"
down_revision = "0009_screen_commands"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``webhook_redeliveries`` (one row per GUID asked for)."""
    op.create_table(
        "webhook_redeliveries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("guid", sa.String(200), nullable=False),
        sa.Column("hook_delivery_id", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(100), nullable=False),
        sa.Column("action", sa.String(100)),
        sa.Column("installation_id", sa.BigInteger()),
        sa.Column("failed_status_code", sa.Integer(), nullable=False),
        sa.Column("failed_status", sa.String(300)),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("http_status", sa.Integer()),
        sa.Column("error", sa.Text()),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.UniqueConstraint("guid", name="uq_webhook_redeliveries_guid"),
    )


def downgrade() -> None:
    """Drop ``webhook_redeliveries``."""
    op.drop_table("webhook_redeliveries")
