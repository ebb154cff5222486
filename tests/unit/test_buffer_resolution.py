"""The pure buffer resolution, against Temporal's `ProcessBuffer` vectors.

Buffered occurrences 3, 5 and 7 (minutes), with or without a run active, under each
policy (reference: schedulers.md §1.9, `buffer_test.go`). Where Temporal keeps a
cancel-other buffer until the old run closes, the supersede policy here cancels the
active run and starts the newest at once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.model import Outcome, Overlap, Reason, Trigger
from triggers.store._buffers import Active, Waiting, resolve_buffer

T0 = utc(2026, 1, 1)
MINUTES = (3, 5, 7)


def _trigger(overlap: Overlap, **declared: Any) -> Trigger:
    return Trigger(
        spec=spec("t", overlap=overlap, **declared),
        revision=1,
        watermark_at=T0,
        created_at=T0,
        updated_at=T0,
    )


def _resolve(trigger: Trigger, *, running: bool, operator: tuple[int, ...] = ()) -> dict[str, Any]:
    waiting = [
        Waiting(occurrence_at=T0 + timedelta(minutes=m), operator=m in operator) for m in MINUTES
    ]
    active = [Active(occurrence_at=T0, run_id="run-1")] if running else []
    plan = resolve_buffer(trigger, waiting, active=active)
    return {
        "launch": [(MINUTES[i], supersedes) for i, supersedes in plan.launch],
        "keep": [MINUTES[i] for i in plan.keep],
        "drop": {MINUTES[i]: (outcome, reason) for i, outcome, reason in plan.drop},
    }


SKIPPED = (Outcome.SKIPPED, Reason.OVERLAP)
SUPERSEDED = (Outcome.SUPERSEDED, Reason.OVERLAP)

VECTORS = [
    ("skip-running", Overlap.SKIP, {}, True, [], [], {3: SKIPPED, 5: SKIPPED, 7: SKIPPED}),
    ("skip-idle", Overlap.SKIP, {}, False, [(3, None)], [], {5: SKIPPED, 7: SKIPPED}),
    ("buffer-running", Overlap.BUFFER, {}, True, [], [3], {5: SKIPPED, 7: SKIPPED}),
    ("buffer-idle", Overlap.BUFFER, {}, False, [(3, None)], [5], {7: SKIPPED}),
    ("buffer_all-running", Overlap.BUFFER_ALL, {}, True, [], [3, 5, 7], {}),
    ("buffer_all-idle", Overlap.BUFFER_ALL, {}, False, [(3, None)], [5, 7], {}),
    (
        "buffer_all-limit",
        Overlap.BUFFER_ALL,
        {"max_buffer": 2},
        True,
        [],
        [3, 5],
        {7: (Outcome.SKIPPED, Reason.BUFFER_FULL)},
    ),
    (
        "supersede-running",
        Overlap.SUPERSEDE,
        {},
        True,
        [(7, "run-1")],
        [],
        {3: SUPERSEDED, 5: SUPERSEDED},
    ),
    (
        "supersede-idle",
        Overlap.SUPERSEDE,
        {},
        False,
        [(7, None)],
        [],
        {3: SUPERSEDED, 5: SUPERSEDED},
    ),
    (
        "allow-idle",
        Overlap.ALLOW,
        {"max_active": 3},
        False,
        [(3, None), (5, None), (7, None)],
        [],
        {},
    ),
    (
        "allow-running",
        Overlap.ALLOW,
        {"max_active": 3},
        True,
        [(3, None), (5, None)],
        [],
        {7: SKIPPED},
    ),
]


@pytest.mark.parametrize(
    ("policy", "declared", "running", "launch", "keep", "drop"),
    [vector[1:] for vector in VECTORS],
    ids=[vector[0] for vector in VECTORS],
)
def test_buffer_resolves_like_temporal_process_buffer(
    policy: Overlap,
    declared: dict[str, int],
    running: bool,
    launch: list[tuple[int, str | None]],
    keep: list[int],
    drop: dict[int, tuple[Outcome, Reason]],
) -> None:
    resolved = _resolve(_trigger(policy, **declared), running=running)
    assert resolved == {"launch": launch, "keep": keep, "drop": drop}


def test_supersede_waits_for_a_run_id_behind_a_reservation() -> None:
    trigger = _trigger(Overlap.SUPERSEDE)
    waiting = [Waiting(occurrence_at=T0 + timedelta(minutes=m), operator=False) for m in MINUTES]
    plan = resolve_buffer(trigger, waiting, active=[Active(occurrence_at=T0, run_id=None)])
    assert ([i for i, _ in plan.launch], plan.keep) == ([], [2])


def test_operator_occurrences_wait_in_order_and_are_never_dropped() -> None:
    resolved = _resolve(_trigger(Overlap.SKIP), running=True, operator=(3, 5))
    assert resolved == {"launch": [], "keep": [3, 5], "drop": {7: SKIPPED}}
    idle = _resolve(_trigger(Overlap.SKIP), running=False, operator=(3, 5))
    assert idle == {"launch": [(3, None)], "keep": [5], "drop": {7: SKIPPED}}
