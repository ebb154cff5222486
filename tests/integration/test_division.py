"""Two schedulers on one store share the triggers, and one takes over a silent one's share."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import timedelta

import pytest

from looms_runtime.db import Database
from tests.factories import spec
from tests.integration.harness import Harness
from triggers.clock import utc
from triggers.model import Outcome, Overlap
from triggers.runner.fake import FakeRunner
from triggers.scheduler.division import owner_of

T0 = utc(2026, 3, 1, 12)
POLL = timedelta(seconds=1)
LEASE = timedelta(seconds=10)
IDS = [f"t{n}" for n in range(40)]


@pytest.fixture
def pair(database: Database) -> Iterator[tuple[Harness, Harness]]:
    runner = FakeRunner(auto_complete=True)
    a = Harness(
        database,
        start=T0,
        runner=runner,
        owner="daemon-a",
        host="host-a",
        poll_interval=POLL,
        owner_lease=LEASE,
    )
    b = Harness(
        Database(str(database.url.render_as_string(hide_password=False))),
        start=T0,
        runner=runner,
        owner="daemon-b",
        host="host-b",
        poll_interval=POLL,
        owner_lease=LEASE,
    )
    a.apply(
        [spec(t, every=timedelta(seconds=1), overlap=Overlap.ALLOW, max_active=1000) for t in IDS]
    )
    b.scheduler.refresh_soon()
    yield a, b
    a.close()
    b.close()
    b.db.dispose()


def drive(harnesses: list[Harness], seconds: range) -> None:
    for second in seconds:
        for h in harnesses:
            h.clock.set(T0 + timedelta(seconds=second))
            h.step()


def hosts_by_trigger(a: Harness, since_second: int) -> dict[str, set[str | None]]:
    found: dict[str, set[str | None]] = defaultdict(set)
    for row in a.history():
        if row.occurrence_at >= T0 + timedelta(seconds=since_second):
            found[row.trigger_id].add(row.host)
    return found


def test_each_trigger_is_claimed_by_its_owner_and_each_occurrence_once(
    pair: tuple[Harness, Harness],
) -> None:
    a, b = pair

    drive([a, b], range(0, 31))

    rows = a.history()
    assert Counter((r.trigger_id, r.occurrence_at) for r in rows).most_common(1)[0][1] == 1
    assert {r.outcome for r in rows} == {Outcome.COMPLETED}
    # Once each has read the other's heartbeat (a busy loop lists at least every 10 s),
    # every trigger is its owner's alone.
    expected = {t: owner_of(t, ["daemon-a", "daemon-b"]).replace("daemon", "host") for t in IDS}
    assert hosts_by_trigger(a, since_second=12) == {t: {host} for t, host in expected.items()}
    assert {"host-a", "host-b"} <= set(expected.values())


def test_a_silent_daemons_share_is_claimed_by_the_other_in_time_and_once(
    pair: tuple[Harness, Harness],
) -> None:
    a, b = pair
    drive([a, b], range(0, 16))

    drive([a], range(16, 46))  # b stops ticking: hung, or dead on another host

    rows = a.history()
    per_occurrence = Counter((r.trigger_id, r.occurrence_at) for r in rows)
    assert set(per_occurrence.values()) == {1}
    assert len(per_occurrence) == len(IDS) * 45  # nothing lost, nothing missed
    assert {r.outcome for r in rows} == {Outcome.COMPLETED}
    b_share = {t for t in IDS if owner_of(t, ["daemon-a", "daemon-b"]) == "daemon-b"}
    taken = [r for r in rows if r.trigger_id in b_share and r.host == "host-a"]
    late = [r.launched_at - r.occurrence_at for r in taken if r.launched_at is not None]
    # Each handed off for 2 s, until b's heartbeat is older than its lease: then a's alone.
    assert late and max(late) <= timedelta(seconds=3)
    settled_at = T0 + timedelta(seconds=16 + 10 + 11)
    on_time = {
        r.launched_at - r.occurrence_at
        for r in taken
        if r.launched_at is not None and r.occurrence_at > settled_at
    }
    assert on_time == {timedelta(0)}
