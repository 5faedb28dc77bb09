"""Delivery leases: which replica claimed a delivery and until when (several ``serve``
replicas on one PostgreSQL database).

Revision ID: 0011_delivery_leases
Revises: 0010_webhook_redeliveries
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_delivery_leases"
down_revision = "0010_webhook_redeliveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``deliveries.claimed_by`` and ``deliveries.lease_until``."""
    with op.batch_alter_table("deliveries") as b:
        b.add_column(sa.Column("claimed_by", sa.String(200)))
        b.add_column(sa.Column("lease_until", sa.DateTime(timezone=True)))


def downgrade() -> None:
    """Drop the lease columns."""
    with op.batch_alter_table("deliveries") as b:
        b.drop_column("lease_until")
        b.drop_column("claimed_by")
