"""Tables of the trigger store and the fire ledger (SQLAlchemy Core metadata).

Instants are stored as BIGINT epoch milliseconds through `UtcDateTime`: exact,
identical on SQLite and PostgreSQL, cheap to compare, and an occurrence's
identity is its UTC millisecond.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from looms_runtime.columns import JsonType
from triggers.clock import from_ms, to_ms

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """An aware datetime stored as epoch milliseconds; naive values are refused."""

    impl = sa.BigInteger
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> int | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"UtcDateTime needs an aware datetime, got {value!r}")
        return to_ms(value)

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        return None if value is None else from_ms(int(value))


# SQLite only aliases the rowid for INTEGER PRIMARY KEY, not BIGINT.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

triggers = sa.Table(
    "triggers",
    metadata,
    sa.Column("id", sa.String(128), primary_key=True),
    sa.Column("revision", sa.Integer, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("declaration", JsonType(), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("retired", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("pause_note", sa.Text, nullable=True),
    sa.Column("paused_at", UtcDateTime, nullable=True),
    sa.Column("watermark_at", UtcDateTime, nullable=False),
    sa.Column("active_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("buffered_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("runs_launched", sa.Integer, nullable=False, server_default="0"),
    # The ledger row a following range of the same outcome and reason may extend;
    # cleared whenever any other row is written for the trigger.
    sa.Column("open_range_id", sa.BigInteger, nullable=True),
    # The run that blocks new launches: active, and waiting for an operator (parked).
    sa.Column("blocked_by", sa.String(64), nullable=True),
    # The pool its runs take slots of (its declaration's `pool`): a claim counts the
    # pool's active runs by joining the ledger to its members.
    sa.Column("pool", sa.String(128), nullable=True),
    # The trigger whose settled runs it follows, for the single-upstream form of
    # `after:` (`after.trigger`); `trigger_upstreams` lists every form's upstreams.
    sa.Column("upstream", sa.String(128), nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    # The daemon's poll reads the rows written since its last one, and those with a
    # buffered count: indexed, neither scans every trigger every few seconds.
    sa.Index("ix_triggers_updated_at", "updated_at"),
    # (Not partial: a `postgresql_where` would load the PostgreSQL dialect into every
    # command on SQLite.)
    sa.Index("ix_triggers_buffered_count", "buffered_count"),
    sa.Index("ix_triggers_pool", "pool"),
    sa.Index("ix_triggers_upstream", "upstream"),
)

# Each upstream of each dependent trigger (`after:`, one row per listed trigger): a
# settlement finds the dependents of its run's trigger with one indexed read.
trigger_upstreams = sa.Table(
    "trigger_upstreams",
    metadata,
    sa.Column("trigger_id", sa.String(128), primary_key=True),
    sa.Column("upstream", sa.String(128), primary_key=True),
    sa.Index("ix_trigger_upstreams_upstream", "upstream"),
)

fires = sa.Table(
    "fires",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("trigger_id", sa.String(128), nullable=False),
    sa.Column("occurrence_at", UtcDateTime, nullable=False),
    sa.Column("last_occurrence_at", UtcDateTime, nullable=True),
    sa.Column("count", sa.Integer, nullable=False, server_default="1"),
    sa.Column("manual_key", sa.String(200), nullable=False, server_default=""),
    sa.Column("idempotency_key", sa.String(400), nullable=True),
    sa.Column("kind", sa.String(16), nullable=False, server_default="scheduled"),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("reason", sa.String(32), nullable=True),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("supersedes_run_id", sa.String(64), nullable=True),
    # An occurrence skipped with reason `blocked`: the run that blocked it.
    sa.Column("blocked_by", sa.String(64), nullable=True),
    # What the reason names: with `calendar`, the calendar and the day's name.
    sa.Column("reason_detail", sa.String(400), nullable=True),
    # An `after: {all: ...}` occurrence: every upstream run it used, a JSON list (the
    # runs no later occurrence of the trigger may use again).
    sa.Column("upstream_runs", sa.Text, nullable=True),
    sa.Column("revision", sa.Integer, nullable=True),
    sa.Column("host", sa.String(255), nullable=True),
    sa.Column("claimed_at", UtcDateTime, nullable=True),
    sa.Column("launched_at", UtcDateTime, nullable=True),
    sa.Column("settled_at", UtcDateTime, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("reservation", sa.String(64), nullable=True),
    sa.Column("lease_owner", sa.String(255), nullable=True),
    sa.Column("lease_expires_at", UtcDateTime, nullable=True),
    sa.UniqueConstraint("trigger_id", "occurrence_at", "manual_key"),
    sa.UniqueConstraint("idempotency_key"),
    sa.Index("ix_fires_outcome_lease_expires_at", "outcome", "lease_expires_at"),
    sa.Index("ix_fires_occurrence_at", "occurrence_at"),
    sa.Index("ix_fires_outcome_occurrence_at", "outcome", "occurrence_at"),
    sa.Index("ix_fires_settled_at", "settled_at"),
    sa.Index("ix_fires_run_id", "run_id"),
)

heartbeats = sa.Table(
    "heartbeats",
    metadata,
    sa.Column("owner", sa.String(255), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("version", sa.String(64), nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("last_tick_at", UtcDateTime, nullable=False),
    sa.Column("stopped_at", UtcDateTime, nullable=True),
    # The daemon's process as its host can tell it apart: on the same boot, a dead
    # daemon's reservations are taken at once, not after their lease.
    sa.Column("boot_id", sa.String(64), nullable=True),
    sa.Column("process_start", sa.BigInteger, nullable=True),
)

# Stretches of time no daemon ticked on this database, each recorded by the daemon
# whose first tick after it ended it (heartbeats alone are pruned a day after a
# daemon's last one, and say nothing of time before the oldest kept).
downtime = sa.Table(
    "downtime",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("ended_at", UtcDateTime, nullable=False),
    sa.Column("ended_by", sa.String(255), nullable=False),
    sa.Index("ix_downtime_ended_at", "ended_at"),
)

meta = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

# Every declaration a trigger has had, one row per revision (`triggers describe`).
trigger_revisions = sa.Table(
    "trigger_revisions",
    metadata,
    sa.Column("trigger_id", sa.String(128), primary_key=True),
    sa.Column("revision", sa.Integer, primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("declaration", JsonType(), nullable=False),
    sa.Column("applied_at", UtcDateTime, nullable=False),
)

# The audit log: what operators did (apply, pause, fire, cancel...), who, where, why.
operator_actions = sa.Table(
    "operator_actions",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("trigger_id", sa.String(128), nullable=True),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("os_user", sa.String(255), nullable=False),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("changes", JsonType(), nullable=True),
    sa.Index("ix_operator_actions_at", "at"),
    sa.Index("ix_operator_actions_trigger_id_at", "trigger_id", "at"),
)

# The alert outbox: one row per alert and channel, written in the transaction of the
# ledger change that raised it; a sender delivers it under a lease (docs/alerts.md).
alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("alert_id", sa.String(400), nullable=False),
    sa.Column("channel", sa.String(128), nullable=False),
    sa.Column("event", sa.String(16), nullable=False),
    sa.Column("trigger_id", sa.String(128), nullable=False),
    sa.Column("occurrence_at", UtcDateTime, nullable=False),
    sa.Column("payload", JsonType(), nullable=False),
    sa.Column("destination", JsonType(), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("next_attempt_at", UtcDateTime, nullable=False),
    sa.Column("lease_owner", sa.String(255), nullable=True),
    sa.Column("lease_expires_at", UtcDateTime, nullable=True),
    sa.Column("delivered_at", UtcDateTime, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("response", sa.Text, nullable=True),
    sa.UniqueConstraint("alert_id", "channel"),
    sa.Index("ix_alerts_status_id", "status", "id"),
    sa.Index("ix_alerts_trigger_id_id", "trigger_id", "id"),
)

# Per trigger, whether a failure has been alerted and not yet recovered, and when the
# last failure alert (or reminder) was raised: alerts go per state change.
alert_states = sa.Table(
    "alert_states",
    metadata,
    sa.Column("trigger_id", sa.String(128), primary_key=True),
    sa.Column("failing_since", UtcDateTime, nullable=False),
    sa.Column("reminded_at", UtcDateTime, nullable=False),
)
