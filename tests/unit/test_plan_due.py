"""plan_due: catch-up policies, grace, window, truncation and clocks that jump."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers.model import Catchup, CatchupPolicy, CronSchedule, EverySchedule, Reason
from triggers.scheduler.occurrences import (
    CompiledSchedule,
    DuePlan,
    MissedRange,
    compile_schedule,
    count_occurrences,
    plan_due,
)

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
EVERY_MINUTE = compile_schedule(EverySchedule(interval=MINUTE), trigger_id="t")


def _at(clock: str) -> datetime:
    hour, minute = (int(part) for part in clock.split(":"))
    return NOW.replace(hour=hour, minute=minute)


def _plan(
    policy: CatchupPolicy,
    *,
    watermark: str,
    window: timedelta = timedelta(minutes=3),
    grace: timedelta = MINUTE,
    now: datetime = NOW,
    limit: int = 10_000,
) -> DuePlan:
    return plan_due(
        EVERY_MINUTE,
        watermark_at=_at(watermark),
        now=now,
        catchup=Catchup(policy=policy, window=window, grace=grace),
        limit=limit,
    )


def _missed(first: str, last: str, count: int, reason: Reason) -> MissedRange:
    return MissedRange(first_at=_at(first), last_at=_at(last), count=count, reason=reason)


# Every minute, now = 12:00, watermark 11:50: 11:51 ... 12:00 are due. Window 3m, grace
# 1m: 11:51-11:56 are beyond the window, 11:57-11:59 within it, 12:00 within grace.
POLICY_CASES = [
    (
        CatchupPolicy.ALL,
        ["11:57", "11:58", "11:59", "12:00"],
        [_missed("11:51", "11:56", 6, Reason.CATCHUP_WINDOW)],
    ),
    (
        CatchupPolicy.LATEST,
        ["11:59", "12:00"],
        [
            _missed("11:51", "11:56", 6, Reason.CATCHUP_WINDOW),
            _missed("11:57", "11:58", 2, Reason.CATCHUP_POLICY),
        ],
    ),
    (
        CatchupPolicy.NONE,
        ["12:00"],
        [
            _missed("11:51", "11:56", 6, Reason.CATCHUP_WINDOW),
            _missed("11:57", "11:59", 3, Reason.CATCHUP_POLICY),
        ],
    ),
]


@pytest.mark.parametrize(
    ("policy", "dispatch", "missed"), POLICY_CASES, ids=[case[0].value for case in POLICY_CASES]
)
def test_policy_splits_window_and_grace(
    policy: CatchupPolicy, dispatch: list[str], missed: list[MissedRange]
) -> None:
    plan = _plan(policy, watermark="11:50")
    assert plan == DuePlan(
        dispatch=[_at(clock) for clock in dispatch], missed=missed, watermark_at=NOW
    )


@pytest.mark.parametrize("policy", list(CatchupPolicy), ids=[p.value for p in CatchupPolicy])
def test_occurrence_younger_than_grace_is_dispatched_under_every_policy(
    policy: CatchupPolicy,
) -> None:
    plan = _plan(policy, watermark="11:55", window=timedelta(0), grace=timedelta(minutes=2))
    # 11:58 is exactly grace old: no longer "less than grace", and past the window.
    assert plan.dispatch == [_at("11:59"), _at("12:00")]
    assert plan.missed == [_missed("11:56", "11:58", 3, Reason.CATCHUP_WINDOW)]


def test_occurrence_exactly_window_old_is_within_the_window() -> None:
    plan = _plan(CatchupPolicy.ALL, watermark="11:55", window=timedelta(minutes=3))
    assert plan.dispatch[0] == _at("11:57")
    assert plan.missed == [_missed("11:56", "11:56", 1, Reason.CATCHUP_WINDOW)]


def test_grace_longer_than_window_dispatches_everything_within_grace() -> None:
    plan = _plan(CatchupPolicy.NONE, watermark="11:50", window=MINUTE, grace=timedelta(minutes=10))
    assert len(plan.dispatch) == 10
    assert plan.missed == []


def test_latest_with_a_single_late_occurrence_dispatches_it() -> None:
    plan = _plan(CatchupPolicy.LATEST, watermark="11:57", now=_at("11:59") + timedelta(seconds=30))
    assert plan.dispatch == [_at("11:58"), _at("11:59")]
    assert plan.missed == []


def test_on_time_tick_dispatches_the_occurrence() -> None:
    plan = _plan(CatchupPolicy.LATEST, watermark="11:59", now=NOW + timedelta(milliseconds=3))
    assert plan == DuePlan(dispatch=[NOW], missed=[], watermark_at=NOW)


def test_nothing_due_keeps_the_watermark() -> None:
    plan = _plan(CatchupPolicy.ALL, watermark="12:00", now=NOW + timedelta(seconds=59))
    assert plan == DuePlan(dispatch=[], missed=[], watermark_at=NOW)


def test_occurrence_at_the_watermark_is_never_returned() -> None:
    plan = _plan(CatchupPolicy.ALL, watermark="11:58", window=timedelta(days=1))
    assert plan.dispatch == [_at("11:59"), _at("12:00")]


@pytest.mark.parametrize(
    "now", [NOW - timedelta(hours=1), NOW], ids=["clock-stepped-back", "clock-unchanged"]
)
def test_clock_at_or_before_watermark_gives_an_empty_plan(now: datetime) -> None:
    plan = plan_due(
        EVERY_MINUTE, watermark_at=NOW, now=now, catchup=Catchup(policy=CatchupPolicy.ALL)
    )
    assert plan == DuePlan(dispatch=[], missed=[], watermark_at=NOW, truncated=False)


def test_limit_truncates_and_the_caller_resumes_from_the_watermark() -> None:
    catchup = Catchup(policy=CatchupPolicy.ALL, window=timedelta(days=1))
    watermark, dispatched, calls = _at("11:48"), [], 0
    while True:
        plan = plan_due(EVERY_MINUTE, watermark_at=watermark, now=NOW, catchup=catchup, limit=5)
        calls += 1
        assert len(plan.dispatch) <= 5
        dispatched += plan.dispatch
        watermark = plan.watermark_at
        if not plan.truncated:
            break
    assert calls == 3
    assert dispatched == [_at("11:48") + MINUTE * k for k in range(1, 13)]
    assert watermark == NOW


def test_limit_equal_to_the_work_is_not_truncated() -> None:
    plan = _plan(CatchupPolicy.ALL, watermark="11:50", window=timedelta(days=1), limit=10)
    assert len(plan.dispatch) == 10
    assert not plan.truncated


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit"):
        _plan(CatchupPolicy.ALL, watermark="11:50", limit=0)


def test_seven_day_outage_of_every_second_trigger_is_counted_not_listed() -> None:
    schedule = compile_schedule(EverySchedule(interval=timedelta(seconds=1)), trigger_id="t")
    catchup = Catchup(policy=CatchupPolicy.LATEST, window=timedelta(days=1), grace=MINUTE)
    plan = plan_due(
        schedule, watermark_at=NOW - timedelta(days=7), now=NOW, catchup=catchup, limit=100
    )
    window_start = NOW - timedelta(days=1)
    assert plan.missed == [
        MissedRange(
            first_at=NOW - timedelta(days=7, seconds=-1),
            last_at=window_start - timedelta(seconds=1),
            count=6 * 86_400 - 1,
            reason=Reason.CATCHUP_WINDOW,
        ),
        MissedRange(
            first_at=window_start,
            last_at=NOW - timedelta(seconds=61),
            count=86_400 - 60,
            reason=Reason.CATCHUP_POLICY,
        ),
    ]
    assert plan.dispatch[0] == NOW - timedelta(seconds=60)  # the latest of the late ones
    assert plan.dispatch[1:] == [NOW - timedelta(seconds=s) for s in range(59, -1, -1)]
    assert sum(r.count for r in plan.missed) + len(plan.dispatch) == 604_800
    assert not plan.truncated


def test_seven_day_outage_of_every_second_cron_across_dst_is_counted() -> None:
    # Berlin springs forward on 2026-03-29: elapsed seconds still number 604,800.
    now = datetime(2026, 4, 1, tzinfo=UTC)
    schedule = compile_schedule(
        CronSchedule(expression="* * * * * *"), trigger_id="t", timezone="Europe/Berlin"
    )
    for policy in CatchupPolicy:
        catchup = Catchup(policy=policy, window=timedelta(hours=1), grace=MINUTE)
        watermark, total = now - timedelta(days=7), 0
        while True:
            plan = plan_due(schedule, watermark_at=watermark, now=now, catchup=catchup)
            total += sum(r.count for r in plan.missed) + len(plan.dispatch)
            watermark = plan.watermark_at
            if not plan.truncated:
                break
        assert total == 604_800
        assert watermark == now


def test_fixed_time_cron_outage_across_dst_counts_the_gap_firing() -> None:
    schedule = compile_schedule(
        CronSchedule(expression="30 2 * * *"), trigger_id="t", timezone="Europe/Berlin"
    )
    now = datetime(2026, 4, 1, 12, tzinfo=UTC)
    plan = plan_due(
        schedule,
        watermark_at=now - timedelta(days=7),
        now=now,
        catchup=Catchup(policy=CatchupPolicy.NONE, window=timedelta(days=30)),
    )
    assert plan.dispatch == []
    assert plan.missed == [
        MissedRange(
            first_at=datetime(2026, 3, 26, 1, 30, tzinfo=UTC),
            last_at=datetime(2026, 4, 1, 0, 30, tzinfo=UTC),
            count=7,  # 03-29 fires once, at 03:00 CEST
            reason=Reason.CATCHUP_POLICY,
        )
    ]


class _EveryTenSeconds:
    """A schedule known only through the CompiledSchedule protocol: it must be listed."""

    def next_after(self, after: datetime) -> datetime | None:
        seconds = int(after.timestamp()) // 10 * 10 + 10
        return datetime.fromtimestamp(seconds, UTC)


def test_schedule_without_counting_is_stepped_within_the_limit() -> None:
    catchup = Catchup(policy=CatchupPolicy.LATEST, window=timedelta(minutes=5), grace=MINUTE)
    watermark, missed, dispatched, calls = NOW - timedelta(hours=1), 0, [], 0
    while True:
        plan = plan_due(
            _EveryTenSeconds(), watermark_at=watermark, now=NOW, catchup=catchup, limit=50
        )
        calls += 1
        missed += sum(r.count for r in plan.missed)
        dispatched += plan.dispatch
        watermark = plan.watermark_at
        if not plan.truncated:
            break
    assert calls > 1
    assert missed + len(dispatched) == 360
    assert dispatched == [NOW - timedelta(seconds=s) for s in (60, 50, 40, 30, 20, 10, 0)]


SCHEDULES: list[CompiledSchedule] = [
    EVERY_MINUTE,
    compile_schedule(EverySchedule(interval=timedelta(seconds=7)), trigger_id="t"),
    compile_schedule(
        CronSchedule(expression="*/7 1-3 * * *"), trigger_id="t", timezone="America/New_York"
    ),
    compile_schedule(
        CronSchedule(expression="30 1 * * *"), trigger_id="t", timezone="America/New_York"
    ),
    _EveryTenSeconds(),
]


@settings(max_examples=150, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    policy=st.sampled_from(list(CatchupPolicy)),
    outage_s=st.integers(min_value=0, max_value=12 * 3_600),
    window_s=st.integers(min_value=0, max_value=86_400),
    grace_s=st.integers(min_value=0, max_value=3_600),
    limit=st.integers(min_value=1, max_value=40),
    now_offset_s=st.integers(min_value=0, max_value=2 * 86_400),
)
def test_every_occurrence_is_accounted_for_exactly_once(
    schedule: CompiledSchedule,
    policy: CatchupPolicy,
    outage_s: int,
    window_s: int,
    grace_s: int,
    limit: int,
    now_offset_s: int,
) -> None:
    now = datetime(2026, 10, 31, tzinfo=UTC) + timedelta(seconds=now_offset_s)  # NY falls back
    start = now - timedelta(seconds=outage_s)
    catchup = Catchup(
        policy=policy, window=timedelta(seconds=window_s), grace=timedelta(seconds=grace_s)
    )
    total = count_occurrences(schedule, after=start, until=now)
    watermark, accounted, dispatched = start, 0, []
    for _ in range(total + 1):  # each call handles at least one occurrence
        plan = plan_due(schedule, watermark_at=watermark, now=now, catchup=catchup, limit=limit)
        assert len(plan.dispatch) <= limit
        assert all(watermark < at <= now for at in plan.dispatch)
        for missed in plan.missed:
            assert watermark < missed.first_at <= missed.last_at <= now
        assert plan.watermark_at >= watermark
        accounted += sum(r.count for r in plan.missed) + len(plan.dispatch)
        dispatched += plan.dispatch
        watermark = plan.watermark_at
        if not plan.truncated:
            break
    assert not plan.truncated
    assert accounted == total
    assert dispatched == sorted(set(dispatched))
    assert all(now - at <= catchup.window or now - at < catchup.grace for at in dispatched)


def test_forever_window_and_grace_do_not_overflow() -> None:
    catchup = Catchup(policy=CatchupPolicy.NONE, window=timedelta.max, grace=timedelta.max)
    plan = plan_due(EVERY_MINUTE, watermark_at=_at("11:50"), now=NOW, catchup=catchup)
    assert plan.dispatch == [_at("11:50") + MINUTE * k for k in range(1, 11)]


@pytest.mark.parametrize("policy", list(CatchupPolicy), ids=[p.value for p in CatchupPolicy])
@pytest.mark.parametrize(
    "schedule", [EVERY_MINUTE, _EveryTenSeconds()], ids=["counting", "listing"]
)
def test_limit_of_one_makes_progress_on_every_call(
    policy: CatchupPolicy, schedule: CompiledSchedule
) -> None:
    catchup = Catchup(policy=policy, window=timedelta(minutes=2), grace=timedelta(0))
    watermark = NOW - timedelta(minutes=5)
    for _ in range(100):
        plan = plan_due(schedule, watermark_at=watermark, now=NOW, catchup=catchup, limit=1)
        assert plan.dispatch or plan.missed or not plan.truncated
        if not plan.truncated:
            break
        assert plan.watermark_at > watermark
        watermark = plan.watermark_at
    assert plan.watermark_at == NOW
