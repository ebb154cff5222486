"""jitter_delay: deterministic, bounded, and never past the next occurrence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from triggers.scheduler.occurrences import jitter_delay

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JITTER = timedelta(minutes=2)

occurrences = st.integers(min_value=0, max_value=10**12).map(
    lambda ms: T0 + timedelta(milliseconds=ms)
)
trigger_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=20)
durations = st.integers(min_value=0, max_value=10**10).map(lambda us: timedelta(microseconds=us))


def test_jitter_is_a_pinned_function_of_trigger_and_occurrence() -> None:
    # Pinned: every daemon and every release must pick the same delay.
    assert jitter_delay("nightly-backup", T0, JITTER, None) == jitter_delay(
        "nightly-backup", T0, JITTER, None
    )
    assert jitter_delay("nightly-backup", T0, JITTER, None) == timedelta(
        seconds=94, microseconds=60_559
    )


@given(trigger_id=trigger_ids, occurrence_at=occurrences, jitter=durations)
def test_jitter_stays_in_zero_to_jitter(
    trigger_id: str, occurrence_at: datetime, jitter: timedelta
) -> None:
    delay = jitter_delay(trigger_id, occurrence_at, jitter, None)
    assert delay == jitter_delay(trigger_id, occurrence_at, jitter, None)
    assert timedelta(0) <= delay
    assert delay < jitter or delay == jitter == timedelta(0)


@given(trigger_id=trigger_ids, occurrence_at=occurrences, jitter=durations, gap=durations)
def test_jitter_never_reaches_the_next_occurrence(
    trigger_id: str, occurrence_at: datetime, jitter: timedelta, gap: timedelta
) -> None:
    following = occurrence_at + gap + timedelta(microseconds=1)
    delay = jitter_delay(trigger_id, occurrence_at, jitter, following)
    assert occurrence_at + delay < following
    # ... so jittered occurrences keep their order.
    assert occurrence_at + delay < following + jitter_delay(trigger_id, following, jitter, None)


def test_zero_or_negative_jitter_is_no_delay() -> None:
    assert jitter_delay("t", T0, timedelta(0), None) == timedelta(0)
    assert jitter_delay("t", T0, timedelta(seconds=-1), None) == timedelta(0)
    assert jitter_delay("t", T0, JITTER, T0) == timedelta(0)


def test_jitter_spreads_occurrences_and_triggers() -> None:
    delays = [jitter_delay("t", T0 + timedelta(minutes=k), JITTER, None) for k in range(1000)]
    assert len(set(delays)) > 990
    mean = sum(delays, timedelta(0)) / len(delays)
    assert abs(mean - JITTER / 2) < JITTER / 20
    by_trigger = {jitter_delay(f"job-{k}", T0, JITTER, None) for k in range(100)}
    assert len(by_trigger) > 95


def test_jitter_depends_on_the_instant_not_its_zone() -> None:
    local = T0.astimezone(datetime.fromisoformat("2026-01-01T01:00:00+01:00").tzinfo)
    assert jitter_delay("t", local, JITTER, None) == jitter_delay("t", T0, JITTER, None)
