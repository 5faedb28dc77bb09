"""One screen per command, one active screen per pool, 64-bit GitHub ids (the /screen
feature).

* ``screen_commands``: the state-changing commands already run, unique by repository,
  comment id and the SHA-256 of the command's text (a second delivery of one comment queues
  nothing);
* ``uq_screens_one_active_per_pool``: a partial unique index on ``screens.pool`` over the
  active states (dispatched, running, cancelling), so two dispatchers racing cannot put two
  screens onto one pool;
* ``screens`` run, check-run and comment ids become ``BIGINT``: GitHub's workflow run and
  comment ids are past 2**31 (PostgreSQL ``integer`` is 32-bit; on SQLite, whose integers
  are 64-bit anyway, the declared type follows the model).

Revision ID: 0009_screen_commands
Revises: 0008_campaign_headers
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_screen_commands"
down_revision = "0008_campaign_headers"
branch_labels = None
depends_on = None

ACTIVE = "state IN ('dispatched', 'running', 'cancelling')"
WIDE = ("run_id", "check_run_id", "status_comment_id", "result_comment_id",
        "source_comment_id")


def upgrade() -> None:
    """Create ``screen_commands`` and the pool index; widen the GitHub id columns."""
    op.create_table(
        "screen_commands",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("repo", sa.String(200), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("command_sha256", sa.String(64), nullable=False),
        sa.Column("command", sa.String(500), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("repo", "comment_id", "command_sha256",
                            name="uq_screen_commands_comment_command"),
    )
    with op.batch_alter_table("screens") as batch:  # SQLite: a table copy; else ALTER
        for col in WIDE:
            batch.alter_column(col, type_=sa.BigInteger(), existing_type=sa.Integer(),
                               existing_nullable=True)
    op.create_index("uq_screens_one_active_per_pool", "screens", ["pool"], unique=True,
                    sqlite_where=sa.text(ACTIVE), postgresql_where=sa.text(ACTIVE))


def downgrade() -> None:
    """Drop the pool index and ``screen_commands``; narrow the id columns back."""
    op.drop_index("uq_screens_one_active_per_pool", table_name="screens")
    with op.batch_alter_table("screens") as batch:
        for col in WIDE:
            batch.alter_column(col, type_=sa.Integer(), existing_type=sa.BigInteger(),
                               existing_nullable=True)
    op.drop_table("screen_commands")
