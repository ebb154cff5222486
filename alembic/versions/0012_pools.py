"""The triggers' `pool`: the pool a trigger's runs take slots of, so that a claim
counts a pool's active runs from the ledger with one indexed join.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 11:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable and without a default: adding it rewrites no row on either engine. No
    # trigger had a pool before this revision, so there is nothing to fill in.
    with op.batch_alter_table("triggers") as batch:
        batch.add_column(sa.Column("pool", sa.String(128), nullable=True))
    op.create_index("ix_triggers_pool", "triggers", ["pool"])


def downgrade() -> None:
    op.drop_index("ix_triggers_pool", table_name="triggers")
    with op.batch_alter_table("triggers") as batch:
        batch.drop_column("pool")
