"""Trigger store: a key-value table for store-wide facts (the applied declarations digest).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 12:04:41.301377
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_meta")),
    )


def downgrade() -> None:
    op.drop_table("meta")
