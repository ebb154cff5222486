"""Service life: owners' processes told apart on their host, and runs that block triggers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("looms_owners") as batch:
        batch.add_column(sa.Column("boot_id", sa.String(), nullable=True))
        batch.add_column(sa.Column("process_start", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("heartbeats") as batch:
        batch.add_column(sa.Column("boot_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("process_start", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("triggers") as batch:
        batch.add_column(sa.Column("blocked_by", sa.String(length=64), nullable=True))
    with op.batch_alter_table("fires") as batch:
        batch.add_column(sa.Column("blocked_by", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fires") as batch:
        batch.drop_column("blocked_by")
    with op.batch_alter_table("triggers") as batch:
        batch.drop_column("blocked_by")
    with op.batch_alter_table("heartbeats") as batch:
        batch.drop_column("process_start")
        batch.drop_column("boot_id")
    with op.batch_alter_table("looms_owners") as batch:
        batch.drop_column("process_start")
        batch.drop_column("boot_id")
