"""The audit log in SQL (`operator_actions`, `trigger_revisions`), on the store's database.

Its reads are plain SQL over the read seam (`looms_runtime.dbapi`); recording an
entry is a SQLAlchemy Core insert, as every write of the store."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from looms_runtime.dbapi import Rows, marks, read_source, writer
from triggers.clock import from_ms, to_ms
from triggers.store._driver_errors import translated
from triggers.store.audit_log import (
    ActionKind,
    Actor,
    AuditEntry,
    AuditQuery,
    TriggerRevision,
)

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource

_ENTRY = "id, at, action, trigger_id, run_id, host, os_user, note, changes"


class SqlAuditLog:
    """`AuditLog` on a `Database` (see `triggers.store.audit_log` for the contract)."""

    def __init__(self, db: Database | ReadSource) -> None:
        self._db = db
        self._reads = read_source(db)

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
        from triggers.store.schema import operator_actions  # noqa: PLC0415 (writes only)

        with translated(), writer(self._db).write() as conn:
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
        where: list[str] = []
        params: list[Any] = []
        if query.trigger_id is not None:
            where.append("trigger_id = ?")
            params.append(query.trigger_id)
        if query.run_id is not None:
            where.append("run_id = ?")
            params.append(query.run_id)
        if query.actions:
            actions = sorted(a.value for a in query.actions)
            where.append(f"action IN ({marks(len(actions))})")
            params += actions
        if query.since is not None:
            where.append("at >= ?")
            params.append(to_ms(query.since))
        if query.until is not None:
            where.append("at <= ?")
            params.append(to_ms(query.until))
        sql = f"SELECT {_ENTRY} FROM operator_actions"  # noqa: S608 (constants)
        if where:
            sql += f" WHERE {' AND '.join(where)}"
        sql += " ORDER BY at DESC, id DESC LIMIT ?"
        params.append(query.limit)
        with self._read() as rows:
            found = rows.all(sql, params)
            json = rows.json
        return [
            AuditEntry(
                id=int(entry_id),
                at=from_ms(int(at)),
                action=ActionKind(action),
                actor=Actor(host=host, user=os_user),
                trigger_id=trigger_id,
                run_id=run_id,
                note=note,
                changes=json(changes) or {},
            )
            for entry_id, at, action, trigger_id, run_id, host, os_user, note, changes in found
        ]

    def revisions(self, trigger_id: str, *, limit: int = 20) -> Sequence[TriggerRevision]:
        sql = (
            "SELECT trigger_id, revision, digest, declaration, applied_at FROM trigger_revisions "
            "WHERE trigger_id = ? ORDER BY revision DESC LIMIT ?"
        )
        with self._read() as rows:
            found = rows.all(sql, (trigger_id, limit))
            json = rows.json
        return [
            TriggerRevision(
                trigger_id=row_trigger,
                revision=int(revision),
                digest=digest,
                declaration=json(declaration),
                applied_at=from_ms(int(applied_at)),
            )
            for row_trigger, revision, digest, declaration, applied_at in found
        ]

    @contextmanager
    def _read(self) -> Iterator[Rows]:
        with translated(), self._reads.read() as rows:
            yield rows
