"""The triggers' `upstream`: the trigger whose settled runs a dependent trigger
(`after:`) follows, so that a settlement finds its dependents with one indexed read.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable and without a default: adding it rewrites no row on either engine. No
    # trigger had an upstream before this revision, so there is nothing to fill in.
    with op.batch_alter_table("triggers") as batch:
        batch.add_column(sa.Column("upstream", sa.String(128), nullable=True))
    op.create_index("ix_triggers_upstream", "triggers", ["upstream"])


def downgrade() -> None:
    op.drop_index("ix_triggers_upstream", table_name="triggers")
    with op.batch_alter_table("triggers") as batch:
        batch.drop_column("upstream")
