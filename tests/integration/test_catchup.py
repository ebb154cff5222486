"""Catch-up after a downtime, crossed with every overlap policy and run length;
reference scenarios 8-11; and declarations that change in the middle of a dispatch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from looms_runtime.db import Database
from tests.clocks import FakeClock
from tests.factories import spec
from tests.integration.harness import Harness, ScriptedRunner
from triggers import services
from triggers.clock import utc
from triggers.model import CatchupPolicy, Outcome, Overlap, TriggerSpec
from triggers.runner.fake import FakeRunner
from triggers.store.protocol import ClaimRequest, ClaimResult
from triggers.store.sql import SqlTriggerStore

T0 = utc(2022, 6, 1)
EVERY_5M = "*/5 * * * *"

# -- the table -----------------------------------------------------------------------------
#
# Every 5 minutes; catch-up window 10 minutes, grace 1 minute. A daemon runs from
# 00:00 to 00:12, none from 00:12 to 00:31:30 (the runs go on in the runtime), then
# one runs until 00:41. At the restart :15 and :20 are outside the window, :25 and
# :30 inside it but older than the grace. `allow` runs two at once at most.

SHORT, LONG, NEVER = "2m", "7m", "never"
LENGTHS = {SHORT: timedelta(minutes=2), LONG: timedelta(minutes=7), NEVER: None}
C, L, X = "completed", "launched", "superseded"
S, B, XO = "skipped/overlap", "buffered/overlap", "superseded/overlap"

# Before the downtime (as the ledger finally shows it), by policy and run length.
BEFORE: dict[tuple[str, str], list[str]] = {}
for _policy in ("skip", "buffer", "buffer_all", "supersede", "allow"):
    BEFORE[_policy, SHORT] = [f"00:05 {C}", f"00:10 {C}"]
BEFORE.update(
    {
        ("skip", LONG): [f"00:05 {C}", f"00:10 {S}"],
        ("buffer", LONG): [f"00:05 {C}", f"00:10 {C}"],
        ("buffer_all", LONG): [f"00:05 {C}", f"00:10 {C}"],
        ("supersede", LONG): [f"00:05 {X}", f"00:10 {C}"],
        ("allow", LONG): [f"00:05 {C}", f"00:10 {C}"],
        ("skip", NEVER): [f"00:05 {L}", f"00:10 {S}"],
        ("buffer", NEVER): [f"00:05 {L}", f"00:10 {B}"],
        ("buffer_all", NEVER): [f"00:05 {L}", f"00:10 {B}"],
        ("supersede", NEVER): [f"00:05 {X}", f"00:10 {X}"],
        ("allow", NEVER): [f"00:05 {L}", f"00:10 {L}"],
    }
)
MISSED = {
    "all": ["00:15 missed/catchup_window x2"],
    "latest": ["00:15 missed/catchup_window x2", "00:25 missed/catchup_policy"],
    "none": ["00:15 missed/catchup_window x2", "00:25 missed/catchup_policy x2"],
}


def _after(*rows: tuple[str, str]) -> list[str]:
    return [f"00:{minute} {outcome}" for minute, outcome in rows]


# From the restart on, by policy, run length and catch-up policy.
AFTER: dict[tuple[str, str, str], list[str]] = {
    # Runs end before the next occurrence.
    ("skip", SHORT, "all"): _after(("25", C), ("30", S), ("35", C), ("40", L)),
    ("buffer", SHORT, "all"): _after(("25", C), ("30", C), ("35", C), ("40", L)),
    ("buffer_all", SHORT, "all"): _after(("25", C), ("30", C), ("35", C), ("40", L)),
    ("supersede", SHORT, "all"): _after(("25", XO), ("30", C), ("35", C), ("40", L)),
    ("allow", SHORT, "all"): _after(("25", C), ("30", C), ("35", C), ("40", L)),
    **{
        (policy, SHORT, "latest"): _after(("30", C), ("35", C), ("40", L))
        for policy in ("skip", "buffer", "buffer_all", "supersede", "allow")
    },
    **{
        (policy, SHORT, "none"): _after(("35", C), ("40", L))
        for policy in ("skip", "buffer", "buffer_all", "supersede", "allow")
    },
    # Runs outlast the interval.
    ("skip", LONG, "all"): _after(("25", C), ("30", S), ("35", S), ("40", L)),
    ("buffer", LONG, "all"): _after(("25", C), ("30", L), ("35", S), ("40", B)),
    ("buffer_all", LONG, "all"): _after(("25", C), ("30", L), ("35", B), ("40", B)),
    ("supersede", LONG, "all"): _after(("25", XO), ("30", X), ("35", X), ("40", L)),
    ("allow", LONG, "all"): _after(("25", C), ("30", C), ("35", S), ("40", L)),
    ("skip", LONG, "latest"): _after(("30", C), ("35", S), ("40", L)),
    ("buffer", LONG, "latest"): _after(("30", C), ("35", L), ("40", B)),
    ("buffer_all", LONG, "latest"): _after(("30", C), ("35", L), ("40", B)),
    ("supersede", LONG, "latest"): _after(("30", X), ("35", X), ("40", L)),
    ("allow", LONG, "latest"): _after(("30", C), ("35", L), ("40", L)),
    ("skip", LONG, "none"): _after(("35", L), ("40", S)),
    ("buffer", LONG, "none"): _after(("35", L), ("40", B)),
    ("buffer_all", LONG, "none"): _after(("35", L), ("40", B)),
    ("supersede", LONG, "none"): _after(("35", X), ("40", L)),
    ("allow", LONG, "none"): _after(("35", L), ("40", L)),
    # Runs never end (only supersede ever stops one).
    ("skip", NEVER, "all"): _after(("25", S), ("30", S), ("35", S), ("40", S)),
    ("buffer", NEVER, "all"): _after(("25", S), ("30", S), ("35", S), ("40", S)),
    ("buffer_all", NEVER, "all"): _after(("25", B), ("30", B), ("35", B), ("40", B)),
    ("supersede", NEVER, "all"): _after(("25", XO), ("30", X), ("35", X), ("40", L)),
    ("allow", NEVER, "all"): _after(("25", S), ("30", S), ("35", S), ("40", S)),
    ("skip", NEVER, "latest"): _after(("30", S), ("35", S), ("40", S)),
    ("buffer", NEVER, "latest"): _after(("30", S), ("35", S), ("40", S)),
    ("buffer_all", NEVER, "latest"): _after(("30", B), ("35", B), ("40", B)),
    ("supersede", NEVER, "latest"): _after(("30", X), ("35", X), ("40", L)),
    ("allow", NEVER, "latest"): _after(("30", S), ("35", S), ("40", S)),
    ("skip", NEVER, "none"): _after(("35", S), ("40", S)),
    ("buffer", NEVER, "none"): _after(("35", S), ("40", S)),
    ("buffer_all", NEVER, "none"): _after(("35", B), ("40", B)),
    ("supersede", NEVER, "none"): _after(("35", X), ("40", L)),
    ("allow", NEVER, "none"): _after(("35", S), ("40", S)),
}


def _expected(policy: str, length: str, catchup: str) -> list[str]:
    rows = BEFORE[policy, length] + MISSED[catchup] + AFTER[policy, length, catchup]
    return sorted(rows, key=lambda row: row[:5])  # stable: one row per instant


@pytest.mark.parametrize(
    ("policy", "length", "catchup"), sorted(AFTER), ids=["-".join(key) for key in sorted(AFTER)]
)
def test_downtime_by_overlap_run_length_and_catchup(
    reused_database: Database, policy: str, length: str, catchup: str
) -> None:
    runner = ScriptedRunner(FakeClock(T0), lambda _request: (LENGTHS[length], "completed"))
    declared = spec(
        "t",
        cron=EVERY_5M,
        overlap=Overlap(policy),
        max_active=2,
        catchup=CatchupPolicy(catchup),
        window=timedelta(minutes=10),
        grace=timedelta(minutes=1),
    )
    before = Harness(reused_database, start=T0, runner=runner)
    before.apply([declared])
    before.run_until(T0 + timedelta(minutes=12))
    before.close()
    after = Harness(
        reused_database,
        start=T0 + timedelta(minutes=31, seconds=30),
        runner=runner,
        owner="daemon-b",
    )
    after.run_until(T0 + timedelta(minutes=41))
    after.close()

    assert after.ledger("t") == _expected(policy, length, catchup)
    rows = after.history("t")
    assert sum(row.count for row in rows) == 8  # :05 to :40, each accounted for once
    never_ran = [row for row in rows if row.run_id is None]
    assert all(row.reason is not None for row in never_ran)  # "why didn't it run?"
    keys = Counter(request.idempotency_key for request in runner.requests)
    assert set(keys.values()) == {1}  # no occurrence started twice
    trigger = after.store.get_trigger("t")
    assert trigger is not None
    assert trigger.buffered_count == sum(row.outcome is Outcome.BUFFERED for row in rows)
    assert trigger.active_count == sum(
        row.outcome in (Outcome.LAUNCHING, Outcome.LAUNCHED) for row in rows
    )


# -- reference scenarios 8-11 ------------------------------------------------------------------


def _hourly_at_17(**extra: Any) -> TriggerSpec:
    return spec("h", cron="17 * * * *", window=timedelta(hours=1), **extra)


def test_catchup_window_launches_only_the_occurrence_inside_it(reused_database: Database) -> None:
    runner = FakeRunner(auto_complete=True)
    stopped_at = utc(2022, 5, 31, 18)
    first = Harness(reused_database, start=stopped_at, runner=runner)
    first.apply([_hourly_at_17()])
    first.step()
    first.close()
    second = Harness(reused_database, start=T0, runner=runner, owner="daemon-b")
    second.run_until(T0 + timedelta(minutes=18))
    second.close()
    assert second.ledger("h") == [
        "18:17 missed/catchup_window x5",
        "23:17 completed",
        "00:17 completed",
    ]
    assert second.launched_at("h") == {"23:17": "00:00", "00:17": "00:17"}


def test_paused_downtime_is_not_catchup_debt(reused_database: Database) -> None:
    runner = FakeRunner(auto_complete=True)
    stopped_at = utc(2022, 5, 31, 18)
    first = Harness(reused_database, start=stopped_at, runner=runner)
    first.apply([_hourly_at_17()])
    first.step()
    services.pause_trigger(first.store, "h", note="maintenance", now=stopped_at)
    first.close()
    second = Harness(reused_database, start=T0, runner=runner, owner="daemon-b")
    second.step()
    second.clock.set(T0 + timedelta(minutes=3))
    services.resume_trigger(second.store, "h", now=second.clock.now())
    second.scheduler.refresh_soon()
    second.run_until(T0 + timedelta(minutes=18))
    second.close()
    assert second.ledger("h") == ["18:17 skipped/paused x6", "00:17 completed"]
    assert [r.occurrence_at for r in second.history("h") if r.outcome is Outcome.MISSED] == []


def test_long_downtime_is_bounded_by_max_buffer(harness_db: Database) -> None:
    runner = FakeRunner()
    declared = spec(
        "b",
        every=timedelta(minutes=1),
        overlap=Overlap.BUFFER_ALL,
        max_buffer=20,
        catchup=CatchupPolicy.ALL,
        window=timedelta(days=365),
    )
    first = Harness(harness_db, start=T0, runner=runner)
    first.apply([declared])
    first.close()
    second = Harness(harness_db, start=T0 + timedelta(days=1), runner=runner, owner="daemon-b")
    with capture_logs() as logs:
        second.step()
    second.close()
    outcomes = Counter(
        (r.outcome, r.reason.value if r.reason else None) for r in second.history("b")
    )
    assert outcomes == {
        (Outcome.LAUNCHED, None): 1,
        (Outcome.BUFFERED, "overlap"): 20,
        (Outcome.SKIPPED, "buffer_full"): 24 * 60 - 21,
    }
    assert len(runner.requests) == 1
    [warning] = [e for e in logs if e["event"] == "catchup_large"]
    assert warning["count"] == 24 * 60 and warning["log_level"] == "warning"


def test_coalesced_downtime_under_skip_launches_one(reused_database: Database) -> None:
    for policy, launched in ((CatchupPolicy.ALL, "00:05"), (CatchupPolicy.LATEST, "00:30")):
        trigger_id = f"c-{policy.value}"
        runner = FakeRunner()
        h = Harness(reused_database, start=T0, runner=runner, owner=f"d-{policy.value}")
        h.apply([spec(trigger_id, cron=EVERY_5M, catchup=policy, window=timedelta(hours=1))])
        h.step()
        h.clock.set(T0 + timedelta(minutes=31))
        h.step()
        h.close()
        launches = [line for line in h.ledger(trigger_id) if line.endswith(L)]
        assert launches == [f"{launched} {L}"]
        others = [line for line in h.ledger(trigger_id) if not line.endswith(L)]
        if policy is CatchupPolicy.ALL:
            assert others == [f"00:{m} {S}" for m in ("10", "15", "20", "25", "30")]
        else:
            assert others == ["00:05 missed/catchup_policy x5"]


@pytest.fixture
def harness_db(sqlite_url: str) -> Iterator[Database]:
    """SQLite only: a day of every-minute occurrences is a volume test, not a contract one."""
    db = Database(sqlite_url)
    yield db
    db.dispose()


# -- revisions that move between plan and claim ----------------------------------------------


class EditingStore(SqlTriggerStore):
    """A store whose trigger is edited by someone else just before each of the next
    `edits` claims, as another daemon applying a new file would."""

    def __init__(self, db: Database, edits: Sequence[TriggerSpec]) -> None:
        super().__init__(db)
        self.edits = list(edits)
        self.claims: list[list[int]] = []

    def claim(self, requests: Sequence[ClaimRequest], **kwargs: Any) -> list[ClaimResult]:
        if self.edits:
            self.apply([self.edits.pop(0)], now=kwargs["now"])
        self.claims.append([r.expected_revision for r in requests])
        return super().claim(requests, **kwargs)


def test_revision_moved_before_the_claim_is_decided_from_the_new_declaration(
    reused_database: Database,
) -> None:
    store = EditingStore(reused_database, [])
    h = Harness(reused_database, start=T0, runner=FakeRunner(), store=store)
    h.apply([spec("r", every=timedelta(minutes=1), input={"v": 1})])
    store.edits = [spec("r", every=timedelta(minutes=1), input={"v": 2})]
    h.run_until(T0 + timedelta(minutes=1))
    h.close()
    assert store.claims == [[1], [2]]  # the mismatch, then one re-read and a new decision
    [row] = h.history("r")
    assert (row.revision, row.claimed_at) == (2, T0 + timedelta(minutes=1))
    assert [r.input for r in h.runner.requests] == [{"v": 2}]


def test_revision_moved_to_a_schedule_without_the_occurrence_claims_nothing(
    reused_database: Database,
) -> None:
    store = EditingStore(reused_database, [])
    h = Harness(reused_database, start=T0, runner=FakeRunner(auto_complete=True), store=store)
    h.apply([spec("r", every=timedelta(minutes=1))])
    store.edits = [spec("r", every=timedelta(minutes=2))]
    h.run_until(T0 + timedelta(minutes=4))
    h.close()
    assert h.ledger("r") == [f"00:02 {C}", f"00:04 {C}"]  # 00:01 belonged to the old one


def test_second_revision_mismatch_waits_for_the_next_tick(reused_database: Database) -> None:
    store = EditingStore(reused_database, [])
    h = Harness(reused_database, start=T0, runner=FakeRunner(), store=store)
    h.apply([spec("r", every=timedelta(minutes=1), input={"v": 1})])
    store.edits = [
        spec("r", every=timedelta(minutes=1), input={"v": 2}),
        spec("r", every=timedelta(minutes=1), input={"v": 3}),
    ]
    h.clock.set(T0 + timedelta(minutes=1))
    wake = h.step()
    assert store.claims == [[1], [2]]
    assert h.history("r") == []  # nothing decided yet: the watermark stayed behind
    assert wake == T0 + timedelta(minutes=1, seconds=1)
    h.clock.set(wake)
    h.step()
    h.close()
    assert store.claims == [[1], [2], [3]]
    [row] = h.history("r")
    assert (row.occurrence_at, row.revision) == (T0 + timedelta(minutes=1), 3)
    assert row.claimed_at == wake
