"""The runtime's tables (SQLAlchemy Core), the source the Alembic migrations follow.

Every instant is a BIGINT of epoch milliseconds; run ids are UUIDv7, so the primary
key already lists runs newest first. The event log is the source of truth;
`looms_runs` is its header, updated in the same transaction as every append
(`last_seq` is the append fence), and `looms_snapshots` caches folded state.
`looms_inbox` holds external requests (cancel, signal, retry) until the run's owner
folds them into the log; its key deduplicates them even after the log is trimmed.
A run purged by retention keeps its header row as its tombstone (`purged_at` set,
its log and payloads gone): the unique key then refuses the key for good, at no
cost to a start, and `statuses` still answers the run's final status.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from looms_runtime.columns import JsonType
from looms_runtime.statuses import UNSETTLED

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

Json: Any = JsonType()

_PARTIAL: list[tuple[sa.Index, sa.ColumnElement[bool]]] = []


def _partial(name: str, column: sa.Column[Any], where: sa.ColumnElement[bool]) -> None:
    """A partial index; its PostgreSQL condition is given by `for_postgresql`, since
    naming it here would load the PostgreSQL dialect into every process on SQLite."""
    _PARTIAL.append((sa.Index(name, column, sqlite_where=where), where))


def for_postgresql() -> None:
    """Complete the tables for PostgreSQL (the partial indexes' conditions): call it
    before `metadata.create_all` on PostgreSQL or comparing the tables with one."""
    for index, where in _PARTIAL:
        index.dialect_kwargs["postgresql_where"] = where


flows = sa.Table(
    "looms_flows",
    metadata,
    sa.Column("name", sa.String, nullable=False),
    sa.Column("version", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("definition", Json, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("name", "version"),
)

runs = sa.Table(
    "looms_runs",
    metadata,
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("flow", sa.String, nullable=False),
    sa.Column("version", sa.String, nullable=False),
    sa.Column("idempotency_key", sa.String, nullable=False),
    sa.Column("identity_hash", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("input", Json, nullable=False),
    sa.Column("env", Json, nullable=False),
    sa.Column("attributes", Json, nullable=False),
    sa.Column("result", Json, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("snapshot_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("lease_owner", sa.String, nullable=True),
    sa.Column("lease_epoch", sa.BigInteger, nullable=False),
    sa.Column("next_wake_at", sa.BigInteger, nullable=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
    sa.Column("settled_at", sa.BigInteger, nullable=True),
    sa.Column("purged_at", sa.BigInteger, nullable=True),
    sa.PrimaryKeyConstraint("run_id"),
    sa.UniqueConstraint("idempotency_key"),
    sa.ForeignKeyConstraint(["flow", "version"], ["looms_flows.name", "looms_flows.version"]),
    sa.CheckConstraint(
        "status IN ('active', 'parked', 'completed', 'failed', 'cancelled')", name="status"
    ),
)
_unsettled = runs.c.status.in_(UNSETTLED)
sa.Index("ix_looms_runs_status_created_at", runs.c.status, runs.c.created_at)
_partial("ix_looms_runs_lease_owner_unsettled", runs.c.lease_owner, _unsettled)
_purgeable = sa.and_(runs.c.settled_at.is_not(None), runs.c.purged_at.is_(None))
_partial("ix_looms_runs_settled_at_purgeable", runs.c.settled_at, _purgeable)
_purged = runs.c.purged_at.is_not(None)
_partial("ix_looms_runs_purged_at_purged", runs.c.purged_at, _purged)
_waking = sa.and_(runs.c.status == "active", runs.c.next_wake_at.is_not(None))
_partial("ix_looms_runs_next_wake_at_active", runs.c.next_wake_at, _waking)

events = sa.Table(
    "looms_events",
    metadata,
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("type", sa.String, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "seq"),
    sa.ForeignKeyConstraint(["run_id"], ["looms_runs.run_id"], ondelete="CASCADE"),
)

snapshots = sa.Table(
    "looms_snapshots",
    metadata,
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("state", Json, nullable=False),
    sa.Column("state_hash", sa.String, nullable=False),
    sa.Column("fold_version", sa.String, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "seq"),
    sa.ForeignKeyConstraint(["run_id"], ["looms_runs.run_id"], ondelete="CASCADE"),
)

inbox = sa.Table(
    "looms_inbox",
    metadata,
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("key", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=True),
    sa.Column("payload", Json, nullable=False),
    sa.Column("request_hash", sa.String, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("consumed_seq", sa.BigInteger, nullable=True),
    sa.PrimaryKeyConstraint("run_id", "key"),
    sa.ForeignKeyConstraint(["run_id"], ["looms_runs.run_id"], ondelete="CASCADE"),
    sa.CheckConstraint("kind IN ('cancel', 'signal', 'retry')", name="kind"),
)
_pending = inbox.c.consumed_seq.is_(None)
_partial("ix_looms_inbox_created_at_pending", inbox.c.created_at, _pending)

owners = sa.Table(
    "looms_owners",
    metadata,
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("host", sa.String, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=False),
    sa.Column("heartbeat_at", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=False),
    # The owner's process as this host can tell it apart (see `looms_runtime.host`):
    # on the same boot, a dead process's runs are taken at once, not after the lease.
    sa.Column("boot_id", sa.String, nullable=True),
    sa.Column("process_start", sa.BigInteger, nullable=True),
    sa.PrimaryKeyConstraint("owner"),
)
