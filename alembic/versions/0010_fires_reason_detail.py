"""The ledger's `reason_detail`: what a row's reason names (with `calendar`, the
calendar and the day's name, `de-by (Allerheiligen)`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable and without a default: adding it rewrites no row on either engine.
    with op.batch_alter_table("fires") as batch:
        batch.add_column(sa.Column("reason_detail", sa.String(400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fires") as batch:
        batch.drop_column("reason_detail")
