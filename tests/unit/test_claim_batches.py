"""A tick's claim requests, cut into transactions: never between two of one trigger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from triggers.scheduler.dispatch import claim_batches
from triggers.store.protocol import ClaimRequest

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def requests(counts: list[int]) -> list[ClaimRequest]:
    """`counts[n]` occurrences of trigger n, each trigger's together, as a tick plans them."""
    return [
        ClaimRequest(
            trigger_id=f"t{n}", occurrence_at=T0 + timedelta(seconds=k), expected_revision=1
        )
        for n, count in enumerate(counts)
        for k in range(count)
    ]


def test_a_tick_of_many_triggers_is_claimed_in_batches_of_the_size() -> None:
    batches = claim_batches(requests([1] * 300), 128)
    assert [len(batch) for batch in batches] == [128, 128, 44]


def test_a_trigger_catching_up_stays_in_one_batch_even_past_the_size() -> None:
    batches = claim_batches(requests([127, 5, 200, 1]), 128)
    assert [sorted({r.trigger_id for r in batch}) for batch in batches] == [
        ["t0", "t1"],
        ["t2"],
        ["t3"],
    ]
    assert [len(batch) for batch in batches] == [132, 200, 1]


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=60), st.integers(1, 100))
def test_batches_hold_every_request_once_in_order_and_split_no_trigger(
    counts: list[int], size: int
) -> None:
    planned = requests(counts)
    batches = claim_batches(planned, size)
    assert [r for batch in batches for r in batch] == planned
    owners = [{r.trigger_id for r in batch} for batch in batches]
    assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1 :])
    # A batch goes past the size only to finish the trigger it reached the size in.
    for batch in batches[:-1]:
        last = batch[-1].trigger_id
        before = [r for r in batch if r.trigger_id != last]
        assert len(before) < size <= len(batch)
