"""Where the recovery job's scan of the App's webhook log stands, so that a scan longer than
one run's page budget resumes where the last run stopped (the inbox's recovery job).

Revision ID: 0012_webhook_log_scan
Revises: 0011_delivery_leases
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_webhook_log_scan"
down_revision = "0011_delivery_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``webhook_log_scan`` (one row per webhook log; the App's is ``app``)."""
    op.create_table(
        "webhook_log_scan",
        sa.Column("name", sa.String(50), primary_key=True),
        sa.Column("cursor", sa.String(200)),
        sa.Column("top_id", sa.BigInteger()),
        sa.Column("floor_id", sa.BigInteger()),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop ``webhook_log_scan``."""
    op.drop_table("webhook_log_scan")
