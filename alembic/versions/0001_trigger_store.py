"""Trigger store: triggers, the fire ledger and daemon heartbeats.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "triggers",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("declaration", _JSON, nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("retired", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("pause_note", sa.Text(), nullable=True),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("watermark_at", sa.BigInteger(), nullable=False),
        sa.Column("active_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("buffered_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("runs_launched", sa.Integer(), server_default="0", nullable=False),
        sa.Column("open_range_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_triggers")),
    )
    op.create_table(
        "fires",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("trigger_id", sa.String(128), nullable=False),
        sa.Column("occurrence_at", sa.BigInteger(), nullable=False),
        sa.Column("last_occurrence_at", sa.BigInteger(), nullable=True),
        sa.Column("count", sa.Integer(), server_default="1", nullable=False),
        sa.Column("manual_key", sa.String(200), server_default="", nullable=False),
        sa.Column("idempotency_key", sa.String(400), nullable=True),
        sa.Column("kind", sa.String(16), server_default="scheduled", nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("supersedes_run_id", sa.String(64), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.Column("launched_at", sa.BigInteger(), nullable=True),
        sa.Column("settled_at", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reservation", sa.String(64), nullable=True),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fires")),
        sa.UniqueConstraint(
            "trigger_id",
            "occurrence_at",
            "manual_key",
            name=op.f("uq_fires_trigger_id_occurrence_at_manual_key"),
        ),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_fires_idempotency_key")),
    )
    op.create_index("ix_fires_outcome_lease_expires_at", "fires", ["outcome", "lease_expires_at"])
    op.create_index("ix_fires_occurrence_at", "fires", ["occurrence_at"])
    op.create_index("ix_fires_settled_at", "fires", ["settled_at"])
    op.create_index("ix_fires_run_id", "fires", ["run_id"])
    op.create_table(
        "heartbeats",
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("last_tick_at", sa.BigInteger(), nullable=False),
        sa.Column("stopped_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_heartbeats")),
    )


def downgrade() -> None:
    op.drop_table("heartbeats")
    op.drop_index("ix_fires_run_id", table_name="fires")
    op.drop_index("ix_fires_settled_at", table_name="fires")
    op.drop_index("ix_fires_occurrence_at", table_name="fires")
    op.drop_index("ix_fires_outcome_lease_expires_at", table_name="fires")
    op.drop_table("fires")
    op.drop_table("triggers")
