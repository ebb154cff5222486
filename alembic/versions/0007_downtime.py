"""Trigger store: daemon downtime, recorded when a daemon's first tick ends it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "downtime",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_downtime")),
    )
    op.create_index("ix_downtime_ended_at", "downtime", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_downtime_ended_at", table_name="downtime")
    op.drop_table("downtime")
