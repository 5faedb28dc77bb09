"""Revision screens and bisections (the /screen feature's ``/compare`` and ``/bisect``).

* ``screens.control_revision``, ``screens.candidate_revision``: the engine revisions of a
  revision screen's arms (NULL for every other screen);
* ``screens.bisection_id``: the bisection a screen is a step of;
* ``bisections``: one row per ``/bisect``: the range (its commits, oldest first), the track,
  the cap, the error rate, the posterior over the culprit after each step, and the state.

Revision ID: 0014_bisections
Revises: 0013_notify
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_bisections"
down_revision = "0013_notify"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the revision columns to ``screens``; create ``bisections``."""
    with op.batch_alter_table("screens") as batch:
        batch.add_column(sa.Column("control_revision", sa.String(40), nullable=True))
        batch.add_column(sa.Column("candidate_revision", sa.String(40), nullable=True))
        batch.add_column(sa.Column("bisection_id", sa.Integer(), nullable=True))
    op.create_index("ix_screens_bisection_id", "screens", ["bisection_id"])
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(200), nullable=False, index=True),
        sa.Column("pr_number", sa.Integer(), nullable=False),
        sa.Column("installation_id", sa.Integer(), nullable=True),
        sa.Column("campaign", sa.String(200), nullable=False),
        sa.Column("campaign_path", sa.String(500), nullable=False),
        sa.Column("track", sa.String(200), nullable=False),
        sa.Column("pool", sa.String(200), nullable=False),
        sa.Column("good", sa.String(40), nullable=False),
        sa.Column("bad", sa.String(40), nullable=False),
        sa.Column("commits", sa.JSON(), nullable=False),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("error_rate", sa.Float(), nullable=False),
        sa.Column("noise_cv", sa.Float(), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.Column("max_device_hours", sa.Float(), nullable=False),
        sa.Column("posterior", sa.JSON(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("outcome", sa.JSON(), nullable=True),
        sa.Column("requested_by", sa.String(100), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_by", sa.String(100), nullable=True),
        sa.Column("status_comment_id", sa.BigInteger(), nullable=True),
        sa.Column("source_comment_id", sa.BigInteger(), nullable=True),
    )


def downgrade() -> None:
    """Drop ``bisections`` and the revision columns."""
    op.drop_table("bisections")
    op.drop_index("ix_screens_bisection_id", table_name="screens")
    with op.batch_alter_table("screens") as batch:
        batch.drop_column("bisection_id")
        batch.drop_column("candidate_revision")
        batch.drop_column("control_revision")
