"""The alert outbox and each trigger's alerted failure (docs/alerts.md).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("alert_id", sa.String(400), nullable=False),
        sa.Column("channel", sa.String(128), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("trigger_id", sa.String(128), nullable=False),
        sa.Column("occurrence_at", sa.BigInteger(), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("destination", _JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=False),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("delivered_at", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint("alert_id", "channel", name=op.f("uq_alerts_alert_id_channel")),
    )
    op.create_index("ix_alerts_status_id", "alerts", ["status", "id"])
    op.create_index("ix_alerts_trigger_id_id", "alerts", ["trigger_id", "id"])
    op.create_table(
        "alert_states",
        sa.Column("trigger_id", sa.String(128), nullable=False),
        sa.Column("failing_since", sa.BigInteger(), nullable=False),
        sa.Column("reminded_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("trigger_id", name=op.f("pk_alert_states")),
    )


def downgrade() -> None:
    op.drop_table("alert_states")
    op.drop_index("ix_alerts_trigger_id_id", table_name="alerts")
    op.drop_index("ix_alerts_status_id", table_name="alerts")
    op.drop_table("alerts")
