"""Looms runtime: flows, runs, events, snapshots, the inbox and owner leases.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 10:42:41.351319
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "looms_flows",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column(
            "definition",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name=op.f("pk_looms_flows")),
    )
    op.create_table(
        "looms_owners",
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_looms_owners")),
    )
    op.create_table(
        "looms_runs",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("flow", sa.String(), nullable=False),
        sa.Column("version", sa.String(), nullable=False),
        sa.Column("idempotency_key", sa.String(), nullable=False),
        sa.Column("identity_hash", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "env",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "attributes",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "result",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("lease_owner", sa.String(), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), nullable=False),
        sa.Column("next_wake_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("settled_at", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status IN ('active', 'parked', 'completed', 'failed', 'cancelled')",
            name=op.f("ck_looms_runs_status"),
        ),
        sa.ForeignKeyConstraint(
            ["flow", "version"],
            ["looms_flows.name", "looms_flows.version"],
            name=op.f("fk_looms_runs_flow_version_looms_flows"),
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_looms_runs")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_looms_runs_idempotency_key")),
    )
    with op.batch_alter_table("looms_runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_looms_runs_lease_owner_unsettled",
            ["lease_owner"],
            unique=False,
            sqlite_where=sa.text("status IN ('active', 'parked')"),
            postgresql_where=sa.text("status IN ('active', 'parked')"),
        )
        batch_op.create_index(
            "ix_looms_runs_next_wake_at_active",
            ["next_wake_at"],
            unique=False,
            sqlite_where=sa.text("status = 'active' AND next_wake_at IS NOT NULL"),
            postgresql_where=sa.text("status = 'active' AND next_wake_at IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_looms_runs_status_created_at", ["status", "created_at"], unique=False
        )

    op.create_table(
        "looms_events",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["looms_runs.run_id"],
            name=op.f("fk_looms_events_run_id_looms_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_looms_events")),
    )
    op.create_table(
        "looms_inbox",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("consumed_seq", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "kind IN ('cancel', 'signal', 'retry')", name=op.f("ck_looms_inbox_kind")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["looms_runs.run_id"],
            name=op.f("fk_looms_inbox_run_id_looms_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "key", name=op.f("pk_looms_inbox")),
    )
    with op.batch_alter_table("looms_inbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_looms_inbox_created_at_pending",
            ["created_at"],
            unique=False,
            sqlite_where=sa.text("consumed_seq IS NULL"),
            postgresql_where=sa.text("consumed_seq IS NULL"),
        )

    op.create_table(
        "looms_snapshots",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column(
            "state",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("state_hash", sa.String(), nullable=False),
        sa.Column("fold_version", sa.String(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["looms_runs.run_id"],
            name=op.f("fk_looms_snapshots_run_id_looms_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_looms_snapshots")),
    )


def downgrade() -> None:

    op.drop_table("looms_snapshots")
    with op.batch_alter_table("looms_inbox", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_looms_inbox_created_at_pending",
            sqlite_where=sa.text("consumed_seq IS NULL"),
            postgresql_where=sa.text("consumed_seq IS NULL"),
        )

    op.drop_table("looms_inbox")
    op.drop_table("looms_events")
    with op.batch_alter_table("looms_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_looms_runs_status_created_at")
        batch_op.drop_index(
            "ix_looms_runs_next_wake_at_active",
            sqlite_where=sa.text("status = 'active' AND next_wake_at IS NOT NULL"),
            postgresql_where=sa.text("status = 'active' AND next_wake_at IS NOT NULL"),
        )
        batch_op.drop_index(
            "ix_looms_runs_lease_owner_unsettled",
            sqlite_where=sa.text("status IN ('active', 'parked')"),
            postgresql_where=sa.text("status IN ('active', 'parked')"),
        )

    op.drop_table("looms_runs")
    op.drop_table("looms_owners")
    op.drop_table("looms_flows")
