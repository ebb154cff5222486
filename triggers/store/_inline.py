"""Fires launched inside the claim's own transaction (a runner on the store's database).

The claim decides, the runner starts the runs in the same transaction, and the
ledger rows are written `launched` with their run ids (`completed`, when a run
completed in its start: its flow had nothing to run): a fire is one commit, and
no reservation is taken (there is no moment when the runtime holds a run the
ledger does not name, or the reverse). A start the runtime refuses for good is
recorded `failed` in the same commit; one it could not answer for another reason
stays `launching`, its reservation released to be retaken after `RETRY_AFTER` by
the pending pass (as the launcher does after a failed start).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from triggers.errors import RunnerRefusedError
from triggers.model import Outcome
from triggers.store._decide import Counters
from triggers.store.protocol import Claim, CompletedRun, LaunchWithin

RETRY_AFTER_MS = 5000

Fire = tuple[Claim, dict[str, Any], Counters]
"""A claim about to launch, its ledger row (driver values) and its trigger's counters."""


class Launched(NamedTuple):
    """What the starts within a claim did, per fire, and what to call after its commit."""

    run_ids: list[str | None]
    """The run id (launched or completed), or None."""
    refusals: list[str | None]
    """The refusal (the row is `failed`), or None."""
    completed: list[bool]
    """Whether the run completed in its start (the row is `completed`)."""
    after_commit: Callable[[], None]


def launch_within(
    conn: Any, fires: Sequence[Fire], launch: LaunchWithin, *, now_ms: int
) -> Launched:
    """Start the fires' runs in `conn`'s transaction and rewrite their rows to match."""
    results, after_commit = launch(conn, [claim for claim, _, _ in fires])
    run_ids: list[str | None] = []
    refusals: list[str | None] = []
    completed: list[bool] = []
    for (_, row, counters), result in zip(fires, results, strict=True):
        completed.append(isinstance(result, CompletedRun))
        if isinstance(result, CompletedRun):
            row.update(
                outcome=Outcome.COMPLETED.value,
                run_id=result.run_id,
                launched_at=now_ms,
                settled_at=now_ms,
                reservation=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            counters.active_count -= 1
            run_ids.append(result.run_id)
            refusals.append(None)
        elif isinstance(result, str):
            row.update(
                outcome=Outcome.LAUNCHED.value,
                run_id=result,
                launched_at=now_ms,
                reservation=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            run_ids.append(result)
            refusals.append(None)
        elif isinstance(result, RunnerRefusedError):
            row.update(
                outcome=Outcome.FAILED.value,
                error=str(result),
                settled_at=now_ms,
                reservation=None,
                lease_owner=None,
                lease_expires_at=None,
            )
            counters.active_count -= 1
            run_ids.append(None)
            refusals.append(str(result))
        else:  # not answered for good: the row stays `launching`, to be retried
            row.update(
                error=str(result), lease_owner=None, lease_expires_at=now_ms + RETRY_AFTER_MS
            )
            run_ids.append(None)
            refusals.append(None)
    return Launched(run_ids, refusals, completed, after_commit)
