"""Daemons sharing a database divide the triggers: one owner each, agreed without talking."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from triggers.scheduler.division import Division, owner_of
from triggers.scheduler.liveness import UnknownHost
from triggers.store.protocol import Heartbeat

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=10)
IDS = [f"trigger-{n}" for n in range(3000)]


def beat(owner: str, *, age: timedelta = timedelta(0), stopped: bool = False) -> Heartbeat:
    return Heartbeat(
        owner=owner,
        host="h",
        pid=1,
        version="1",
        started_at=NOW - timedelta(hours=1),
        last_tick_at=NOW - age,
        stopped_at=NOW - age if stopped else None,
    )


def division(me: str, *owners: str) -> Division:
    found = Division(me=me, owner_lease=LEASE, host=UnknownHost())
    found.update([beat(owner) for owner in owners], now=NOW)
    return found


def test_every_trigger_has_exactly_one_owner_and_the_shares_are_even() -> None:
    daemons = [division(me, "a", "b", "c") for me in ("a", "b", "c")]

    claimants = Counter(sum(d.mine(t) for d in daemons) for t in IDS)
    shares = [sum(d.mine(t) for t in IDS) for d in daemons]

    assert claimants == {1: len(IDS)}
    assert all(800 < share < 1200 for share in shares), shares


def test_a_daemon_leaving_moves_only_its_own_share() -> None:
    before = {t: owner_of(t, ["a", "b", "c"]) for t in IDS}
    after = {t: owner_of(t, ["a", "b"]) for t in IDS}

    moved = {t for t in IDS if before[t] != after[t]}

    assert moved == {t for t in IDS if before[t] == "c"}


def test_members_are_the_daemons_that_tick_and_did_not_stop() -> None:
    found = Division(me="me", owner_lease=LEASE, host=UnknownHost())

    changed = found.update(
        [
            beat("me"),
            beat("fresh", age=timedelta(seconds=3)),
            beat("silent", age=timedelta(seconds=30)),
            beat("stopped", stopped=True),
        ],
        now=NOW,
    )

    assert changed
    assert found.members == ("fresh", "me")
    assert not found.update([beat("fresh")], now=NOW)  # the same members: no change


def test_a_daemon_alone_owns_everything() -> None:
    alone = division("a")

    assert alone.alone
    assert all(alone.mine(t) for t in IDS[:100])


def test_a_daemon_this_host_knows_is_gone_is_no_member() -> None:
    class Host(UnknownHost):
        def gone(self, beat: Heartbeat) -> bool:
            return beat.owner == "killed"

    found = Division(me="me", owner_lease=LEASE, host=Host())
    found.update([beat("killed"), beat("other")], now=NOW)

    assert found.members == ("me", "other")
