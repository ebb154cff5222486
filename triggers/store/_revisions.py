"""Keeping every declaration a trigger has had: one `trigger_revisions` row per revision."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection

from triggers.store.schema import trigger_revisions


def record_revision(
    conn: Connection, trigger_id: str, revision: int, digest: str, declaration: Any, now: datetime
) -> None:
    """Keep the declaration of a new revision (inside the caller's apply transaction)."""
    conn.execute(
        trigger_revisions.insert().values(
            trigger_id=trigger_id,
            revision=revision,
            digest=digest,
            declaration=declaration,
            applied_at=now,
        )
    )
