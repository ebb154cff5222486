"""Trigger store: every declaration per revision, and the audit log of operator actions.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "trigger_revisions",
        sa.Column("trigger_id", sa.String(128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("declaration", _JSON, nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("trigger_id", "revision", name=op.f("pk_trigger_revisions")),
    )
    # The declarations in force now are the first history there is of them.
    op.execute(
        "INSERT INTO trigger_revisions (trigger_id, revision, digest, declaration, applied_at) "
        "SELECT id, revision, digest, declaration, updated_at FROM triggers"
    )
    op.create_table(
        "operator_actions",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("trigger_id", sa.String(128), nullable=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("os_user", sa.String(255), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("changes", _JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_actions")),
    )
    op.create_index("ix_operator_actions_at", "operator_actions", ["at"])
    op.create_index("ix_operator_actions_trigger_id_at", "operator_actions", ["trigger_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_operator_actions_trigger_id_at", table_name="operator_actions")
    op.drop_index("ix_operator_actions_at", table_name="operator_actions")
    op.drop_table("operator_actions")
    op.drop_table("trigger_revisions")
