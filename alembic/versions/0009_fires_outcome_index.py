"""An index of the ledger by outcome and occurrence: the newest rows of one outcome
(`history --outcome failed`, the dashboard's failing and late triggers) without a
scan of the whole ledger.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 05:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Without it, the newest failed rows of a million-row ledger are found by walking
    # the occurrence index from the newest until enough fail: 20-30 s when none do.
    op.create_index("ix_fires_outcome_occurrence_at", "fires", ["outcome", "occurrence_at"])


def downgrade() -> None:
    op.drop_index("ix_fires_outcome_occurrence_at", table_name="fires")
