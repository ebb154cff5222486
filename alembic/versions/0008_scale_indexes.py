"""Indexes for many triggers and a long ledger: one trigger's history, newest first, and
the triggers changed since a poll.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 14:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # `history ID`: WHERE trigger_id = ? ORDER BY occurrence_at DESC, id DESC LIMIT n
    # reads n index entries instead of sorting every row of the trigger.
    op.create_index(
        "ix_fires_trigger_id_occurrence_at_id", "fires", ["trigger_id", "occurrence_at", "id"]
    )
    # The daemon's poll lists the triggers written since its last one.
    op.create_index("ix_triggers_updated_at", "triggers", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_triggers_updated_at", table_name="triggers")
    op.drop_index("ix_fires_trigger_id_occurrence_at_id", table_name="fires")
