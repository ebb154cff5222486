"""A tick that meets an unexpected error puts the due triggers it took back on the heap."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from structlog.testing import capture_logs

from looms_runtime.db import Database
from tests.factories import spec
from tests.integration.harness import Harness
from triggers.clock import utc
from triggers.model import Outcome
from triggers.store.protocol import ClaimRequest, ClaimResult
from triggers.store.sql import SqlTriggerStore

T0 = utc(2026, 3, 1, 12)


class ClaimFailsOnce(SqlTriggerStore):
    """A store whose first claim meets a bug (an error that is not a TriggersError)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.failures = 1

    def claim(self, requests: Sequence[ClaimRequest], **options: Any) -> list[ClaimResult]:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("a bug below the scheduler")
        return super().claim(requests, **options)


def test_due_trigger_fires_at_the_next_tick_after_an_unexpected_error(
    database: Database,
) -> None:
    store = ClaimFailsOnce(database)
    harness = Harness(database, start=T0, store=store)
    try:
        harness.runner.auto_complete = True
        harness.apply([spec("hourly", every=timedelta(hours=1))])
        harness.step()
        harness.clock.set(T0 + timedelta(hours=1))

        with capture_logs() as logs:
            wake = harness.step()

        assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == [
            "tick_failed"
        ]
        assert harness.history("hourly") == []
        assert wake <= harness.clock.now() + timedelta(seconds=1)

        harness.clock.set(max(wake, harness.clock.now()))
        harness.step()

        assert [(r.occurrence_at, r.outcome) for r in harness.history("hourly")] == [
            (T0 + timedelta(hours=1), Outcome.COMPLETED)
        ]
    finally:
        harness.close()
