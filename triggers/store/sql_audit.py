"""The audit log in SQL (`operator_actions`, `trigger_revisions`), on the store's database."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from looms_runtime.db import Database
from triggers.store._driver_errors import translated
from triggers.store.audit_log import (
    ActionKind,
    Actor,
    AuditEntry,
    AuditQuery,
    TriggerRevision,
)
from triggers.store.schema import operator_actions, trigger_revisions


class SqlAuditLog:
    """`AuditLog` on a `Database` (see `triggers.store.audit_log` for the contract)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, entry: AuditEntry) -> AuditEntry:
        values = {
            "at": entry.at,
            "action": entry.action.value,
            "trigger_id": entry.trigger_id,
            "run_id": entry.run_id,
            "host": entry.actor.host[:255],
            "os_user": entry.actor.user[:255],
            "note": entry.note,
            "changes": dict(entry.changes) or None,
        }
        with translated(), self._db.write() as conn:
            new_id = conn.execute(
                operator_actions.insert().values(**values).returning(operator_actions.c.id)
            ).scalar_one()
        return AuditEntry(
            at=entry.at,
            action=entry.action,
            actor=entry.actor,
            trigger_id=entry.trigger_id,
            run_id=entry.run_id,
            note=entry.note,
            changes=entry.changes,
            id=int(new_id),
        )

    def entries(self, query: AuditQuery) -> list[AuditEntry]:
        table = operator_actions
        statement = sa.select(table)
        if query.trigger_id is not None:
            statement = statement.where(table.c.trigger_id == query.trigger_id)
        if query.run_id is not None:
            statement = statement.where(table.c.run_id == query.run_id)
        if query.actions:
            statement = statement.where(table.c.action.in_(sorted(a.value for a in query.actions)))
        if query.since is not None:
            statement = statement.where(table.c.at >= query.since)
        if query.until is not None:
            statement = statement.where(table.c.at <= query.until)
        statement = statement.order_by(table.c.at.desc(), table.c.id.desc()).limit(query.limit)
        with self._read() as conn:
            rows = conn.execute(statement).mappings().all()
        return [
            AuditEntry(
                id=int(row["id"]),
                at=row["at"],
                action=ActionKind(row["action"]),
                actor=Actor(host=row["host"], user=row["os_user"]),
                trigger_id=row["trigger_id"],
                run_id=row["run_id"],
                note=row["note"],
                changes=row["changes"] or {},
            )
            for row in rows
        ]

    def revisions(self, trigger_id: str, *, limit: int = 20) -> Sequence[TriggerRevision]:
        table = trigger_revisions
        statement = (
            sa.select(table)
            .where(table.c.trigger_id == trigger_id)
            .order_by(table.c.revision.desc())
            .limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(statement).mappings().all()
        return [
            TriggerRevision(
                trigger_id=row["trigger_id"],
                revision=int(row["revision"]),
                digest=row["digest"],
                declaration=row["declaration"],
                applied_at=row["applied_at"],
            )
            for row in rows
        ]

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with translated(), self._db.read() as conn:
            yield conn
