"""Dependent triggers with several upstreams (`after: {all: [...]}` / `{any: [...]}`).

`trigger_upstreams` lists each upstream of each dependent trigger, so a settlement
finds the dependents of its run's trigger with one indexed read whatever the form;
it is filled from `triggers.upstream` (the single-upstream form, which keeps that
column). `fires.upstream_runs` holds the upstream runs an `all:` occurrence used.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trigger_upstreams",
        sa.Column("trigger_id", sa.String(128), nullable=False),
        sa.Column("upstream", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("trigger_id", "upstream", name=op.f("pk_trigger_upstreams")),
    )
    op.create_index("ix_trigger_upstreams_upstream", "trigger_upstreams", ["upstream"])
    op.execute(
        "INSERT INTO trigger_upstreams (trigger_id, upstream) "
        "SELECT id, upstream FROM triggers WHERE upstream IS NOT NULL"
    )
    # Nullable and without a default: adding it rewrites no row on either engine.
    with op.batch_alter_table("fires") as batch:
        batch.add_column(sa.Column("upstream_runs", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fires") as batch:
        batch.drop_column("upstream_runs")
    op.drop_index("ix_trigger_upstreams_upstream", table_name="trigger_upstreams")
    op.drop_table("trigger_upstreams")
