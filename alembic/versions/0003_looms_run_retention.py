"""Looms runtime: purged runs keep their header row as a tombstone of their key.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 11:59:28.559210
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    with op.batch_alter_table("looms_runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("purged_at", sa.BigInteger(), nullable=True))
        batch_op.create_index(
            "ix_looms_runs_purged_at_purged",
            ["purged_at"],
            unique=False,
            sqlite_where=sa.text("purged_at IS NOT NULL"),
            postgresql_where=sa.text("purged_at IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_looms_runs_settled_at_purgeable",
            ["settled_at"],
            unique=False,
            sqlite_where=sa.text("settled_at IS NOT NULL AND purged_at IS NULL"),
            postgresql_where=sa.text("settled_at IS NOT NULL AND purged_at IS NULL"),
        )


def downgrade() -> None:

    with op.batch_alter_table("looms_runs", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_looms_runs_settled_at_purgeable",
            sqlite_where=sa.text("settled_at IS NOT NULL AND purged_at IS NULL"),
            postgresql_where=sa.text("settled_at IS NOT NULL AND purged_at IS NULL"),
        )
        batch_op.drop_index(
            "ix_looms_runs_purged_at_purged",
            sqlite_where=sa.text("purged_at IS NOT NULL"),
            postgresql_where=sa.text("purged_at IS NOT NULL"),
        )
        batch_op.drop_column("purged_at")
