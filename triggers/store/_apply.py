"""An apply's writes to the `triggers` table, and every declaration a trigger has had
(one `trigger_revisions` row per revision)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from triggers.clock import to_ms
from triggers.model import AfterSchedule, TriggerSpec, upstreams_of
from triggers.store._sql_common import executemany
from triggers.store.protocol import ApplyResult
from triggers.store.schema import trigger_revisions, trigger_upstreams, triggers

_NEW_COLUMNS = (
    "id",
    "revision",
    "digest",
    "declaration",
    "enabled",
    "pool",
    "upstream",
    "watermark_at",
    "created_at",
    "updated_at",
)
_INSERT_TRIGGER = triggers.insert().values({name: sa.bindparam(name) for name in _NEW_COLUMNS})
_REVISION_COLUMNS = ("trigger_id", "revision", "digest", "declaration", "applied_at")
_INSERT_REVISION = trigger_revisions.insert().values(
    {name: sa.bindparam(name) for name in _REVISION_COLUMNS}
)


def _single_upstream(spec: TriggerSpec) -> str | None:
    """`triggers.upstream`: the upstream of the single-upstream form of `after:`."""
    schedule = spec.schedule
    if isinstance(schedule, AfterSchedule) and schedule.join == "one":
        return schedule.upstreams[0].trigger
    return None


class ApplyPlan:
    """An apply's writes, gathered so that each kind is one statement for all triggers.

    Ten thousand triggers written one statement at a time took seconds; as
    `executemany` batches, the driver sends them in a few round trips."""

    def __init__(self, stored: dict[str, Any], now: datetime) -> None:
        self._stored = stored
        self._now = now
        self._declared: set[str] = set()
        self._inserts: list[dict[str, Any]] = []
        self._revisions: list[dict[str, Any]] = []
        self._updates: list[dict[str, Any]] = []
        self._retired: list[dict[str, Any]] = []
        # The dependents whose `trigger_upstreams` rows are rewritten, and those rows.
        self._relisted: list[dict[str, Any]] = []
        self._upstreams: list[dict[str, Any]] = []

    def add(self, spec: TriggerSpec, result: ApplyResult) -> None:
        self._declared.add(spec.id)
        row, now = self._stored.get(spec.id), self._now
        declaration, digest = spec.to_json(), spec.digest()
        if row is None:
            self._inserts.append(
                {
                    "id": spec.id,
                    "revision": 1,
                    "digest": digest,
                    "declaration": declaration,
                    "enabled": spec.enabled,
                    "pool": None if spec.pool is None else spec.pool.name,
                    "upstream": _single_upstream(spec),
                    "watermark_at": now,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            self._revision(spec.id, 1, digest, declaration)
            self._list_upstreams(spec, new=True)
            result.created.append(spec.id)
            return
        if row.digest == digest and not row.retired:
            result.unchanged.append(spec.id)
            return
        revision = row.revision
        if row.digest != digest:
            revision += 1
            self._revision(spec.id, revision, digest, declaration)
        self._updates.append(
            {
                "b_id": spec.id,
                "digest": digest,
                "declaration": declaration,
                "enabled": spec.enabled,
                "pool": None if spec.pool is None else spec.pool.name,
                "upstream": _single_upstream(spec),
                "revision": revision,
                # A revived trigger owes nothing for the time it was retired.
                "watermark_at": max(row.watermark_at, now) if row.retired else row.watermark_at,
            }
        )
        if row.digest != digest:
            self._list_upstreams(spec, new=False)
        result.updated.append(spec.id)

    def _list_upstreams(self, spec: TriggerSpec, *, new: bool) -> None:
        if not new:
            self._relisted.append({"b_id": spec.id})
        self._upstreams.extend(
            {"trigger_id": spec.id, "upstream": upstream}
            for upstream in sorted(set(upstreams_of(spec)))
        )

    def retire_undeclared(self, result: ApplyResult) -> None:
        for trigger_id, row in sorted(self._stored.items()):
            if trigger_id not in self._declared and not row.retired:
                self._retired.append({"b_id": trigger_id})
                result.retired.append(trigger_id)

    def write(self, conn: Connection) -> None:
        now = self._now
        if self._inserts or self._revisions:
            # New rows go to the driver as its own values (see `executemany`), each
            # declaration serialized once for its trigger row and its revision row.
            to_driver = triggers.c.declaration.type.dialect_impl(conn.dialect).bind_processor(
                conn.dialect
            )
            encoded: dict[int, Any] = {}

            def driver(row: dict[str, Any], *instants: str) -> dict[str, Any]:
                declaration = row["declaration"]
                if id(declaration) not in encoded:
                    encoded[id(declaration)] = (
                        to_driver(declaration) if to_driver is not None else declaration
                    )
                return {**row, "declaration": encoded[id(declaration)]} | {
                    name: to_ms(row[name]) for name in instants
                }

            inserts = [
                driver(row, "watermark_at", "created_at", "updated_at") for row in self._inserts
            ]
            executemany(conn, _INSERT_TRIGGER, inserts)
            executemany(
                conn, _INSERT_REVISION, [driver(row, "applied_at") for row in self._revisions]
            )
        if self._updates:
            conn.execute(
                triggers.update()
                .where(triggers.c.id == sa.bindparam("b_id"))
                .values(
                    retired=False,
                    # A range row stays under one declaration and never spans unrecorded
                    # time (a retirement), or a backfill could no longer carve from it.
                    open_range_id=None,
                    updated_at=now,
                ),
                self._updates,
            )
        if self._relisted:
            conn.execute(
                trigger_upstreams.delete().where(
                    trigger_upstreams.c.trigger_id == sa.bindparam("b_id")
                ),
                self._relisted,
            )
        if self._upstreams:
            conn.execute(trigger_upstreams.insert(), self._upstreams)
        if self._retired:
            conn.execute(
                triggers.update()
                .where(triggers.c.id == sa.bindparam("b_id"))
                .values(retired=True, updated_at=now),
                self._retired,
            )

    def _revision(self, trigger_id: str, revision: int, digest: str, declaration: Any) -> None:
        self._revisions.append(
            {
                "trigger_id": trigger_id,
                "revision": revision,
                "digest": digest,
                "declaration": declaration,
                "applied_at": self._now,
            }
        )
