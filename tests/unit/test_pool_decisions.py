"""The pool rule of the pure decisions: a claim's (`decide`) and a buffer's
(`resolve_buffer`), given the room the pool has left."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.model import Action, Outcome, Overlap, PoolSpec, Reason, Trigger
from triggers.store._buffers import Active, Waiting, resolve_buffer
from triggers.store._decide import Counters, Decision, decide
from triggers.store.protocol import ClaimRequest

T0 = utc(2026, 1, 1)
POOL = PoolSpec(name="p", slots=2)


def _trigger(overlap: Overlap, *, active: int = 0, buffered: int = 0, **declared: Any) -> Trigger:
    return Trigger(
        spec=spec("t", overlap=overlap, pool=POOL, **declared),
        revision=1,
        watermark_at=T0,
        active_count=active,
        buffered_count=buffered,
        created_at=T0,
        updated_at=T0,
    )


def _decide(trigger: Trigger, room: int | None, **request: Any) -> Decision:
    claim = ClaimRequest(
        trigger_id="t", occurrence_at=T0 + timedelta(minutes=1), expected_revision=1, **request
    )
    has_run = trigger.active_count > 0  # its active runs have run ids
    return decide(trigger, Counters.of(trigger), claim, active_has_run=has_run, pool_room=room)


FULL = [
    (Overlap.SKIP, Decision(Action.SKIP, Reason.POOL_FULL)),
    (Overlap.ALLOW, Decision(Action.SKIP, Reason.POOL_FULL)),
    (Overlap.BUFFER, Decision(Action.BUFFER, Reason.POOL_FULL)),
    (Overlap.BUFFER_ALL, Decision(Action.BUFFER, Reason.POOL_FULL)),
    (Overlap.SUPERSEDE, Decision(Action.BUFFER, Reason.POOL_FULL)),
]


@pytest.mark.parametrize(("overlap", "expected"), FULL, ids=[o.value for o, _ in FULL])
def test_full_pool_follows_the_policy_with_reason_pool_full(
    overlap: Overlap, expected: Decision
) -> None:
    # Each policy's idle trigger would fire: only the pool holds it back.
    assert _decide(_trigger(overlap), None) == Decision(Action.FIRE)
    assert _decide(_trigger(overlap), 0) == expected
    assert _decide(_trigger(overlap), -3) == expected  # more waiting than slots


def test_room_left_fires() -> None:
    assert _decide(_trigger(Overlap.SKIP), 1) == Decision(Action.FIRE)


def test_busy_trigger_keeps_its_own_reason_in_a_full_pool() -> None:
    busy = _trigger(Overlap.SKIP, active=1)
    assert _decide(busy, 0) == Decision(Action.SKIP, Reason.OVERLAP)


def test_a_second_waiting_occurrence_of_buffer_is_dropped_pool_full() -> None:
    waiting = _trigger(Overlap.BUFFER, buffered=1)
    assert _decide(waiting, 0) == Decision(Action.SKIP, Reason.POOL_FULL)


def test_operators_allow_is_bounded_by_the_pool() -> None:
    trigger = _trigger(Overlap.SKIP, active=1)
    manual = {"kind": "manual", "manual_key": "k", "overlap": Overlap.ALLOW}
    assert _decide(trigger, 1, **manual) == Decision(Action.FIRE)
    assert _decide(trigger, 0, **manual) == Decision(Action.SKIP, Reason.POOL_FULL)


def _waiting(*minutes: int) -> list[Waiting]:
    return [Waiting(occurrence_at=T0 + timedelta(minutes=m), operator=False) for m in minutes]


def test_buffer_launches_no_more_than_the_pool_has_room_for() -> None:
    trigger = _trigger(Overlap.ALLOW, max_active=5)
    plan = resolve_buffer(trigger, _waiting(1, 2, 3), active=[], pool_room=2)
    assert plan.launch == [(0, None), (1, None)]
    # `allow` drops its own occurrences that cannot launch: the pool dropped this one.
    assert plan.drop == [(2, Outcome.SKIPPED, Reason.POOL_FULL)]


def test_buffer_waits_while_the_pool_is_full() -> None:
    plan = resolve_buffer(_trigger(Overlap.BUFFER_ALL), _waiting(1, 2), active=[], pool_room=0)
    assert (plan.launch, plan.keep, plan.drop) == ([], [0, 1], [])
    plan = resolve_buffer(_trigger(Overlap.BUFFER), _waiting(1, 2), active=[], pool_room=0)
    assert (plan.launch, plan.keep) == ([], [0])
    assert plan.drop == [(1, Outcome.SKIPPED, Reason.POOL_FULL)]


def test_buffer_behind_its_own_run_keeps_reason_overlap() -> None:
    active = [Active(occurrence_at=T0, run_id="r")]
    plan = resolve_buffer(_trigger(Overlap.BUFFER), _waiting(1, 2), active=active, pool_room=0)
    assert plan.drop == [(1, Outcome.SKIPPED, Reason.OVERLAP)]
