"""Several daemons on one database divide the triggers instead of racing for them.

Every live daemon ranks the live daemons for each trigger by rendezvous hashing
(the highest hash of owner and trigger id wins), so all of them agree on one owner
per trigger without talking to each other, and a daemon joining or leaving moves
only its own share. The owner claims a due occurrence at once; the others hand it
off and look again a moment later (`later`, two seconds): one light read of those
triggers' stored watermarks tells which the owner decided (the entry moves on
from there) and which it did not (dead, hung, or not yet aware of a change of
members), and only those they claim themselves. Exactly-once never rests on the
division: claims are fenced by revision, so two daemons that disagree for a
moment cost one refused claim, and a daemon wrongly taken for alive costs its
share a delay of two seconds, until the members are read again.

Members are read from the heartbeats at each poll: a daemon that stopped, one
provably gone on this host, or one silent for longer than the owner lease is not
a member. A daemon alone owns everything and pays nothing for this.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta

from triggers.errors import TriggersError
from triggers.scheduler.liveness import Host
from triggers.scheduler.timetable import Entry, Timetable
from triggers.store.protocol import Heartbeat


class Division:
    """Which triggers this daemon claims first; see the module doc."""

    def __init__(self, *, me: str, owner_lease: timedelta, host: Host) -> None:
        self._me = me
        self._owner_lease = owner_lease
        self._host = host
        self.members: tuple[str, ...] = (me,)
        self._mine: dict[str, bool] = {}
        self.handed_off = 0
        """Due occurrences left to their owner first, since start."""
        self.taken_over = 0
        """Of those, the ones their owner had not decided in time, claimed here."""

    def update(self, beats: Iterable[Heartbeat], *, now: datetime) -> bool:
        """Take the members from the heartbeats; True when they changed."""
        members = {self._me}
        for beat in beats:
            if (
                beat.stopped_at is None
                and now - beat.last_tick_at <= self._owner_lease
                and not self._host.gone(beat)
            ):
                members.add(beat.owner)
        ordered = tuple(sorted(members))
        if ordered == self.members:
            return False
        self.members = ordered
        self._mine.clear()
        return True

    @property
    def alone(self) -> bool:
        return len(self.members) == 1

    def claim_now(
        self,
        due: list[Entry],
        *,
        timetable: Timetable,
        later: datetime,
        watermarks: Callable[[Collection[str]], dict[str, datetime]],
    ) -> list[Entry]:
        """The due entries to claim now: this daemon's share, and those handed off
        before that their owner did not decide meanwhile. The others come due again
        at `later`. Whether the owner decided is one light read of the handed-off
        triggers' stored watermarks: one it moved on is rescheduled from there."""
        kept, returning = [], []
        for entry in due:
            if entry.handed_off:
                returning.append(entry)
            elif self.mine(entry.trigger.id):
                kept.append(entry)
            else:
                timetable.reschedule(entry, at=later, handed_off=True)
                self.handed_off += 1
        if returning:
            try:
                stored = watermarks([entry.trigger.id for entry in returning])
            except TriggersError:
                stored = {}  # unknown: claim them, the claim's fence decides
            for entry in returning:
                moved_to = stored.get(entry.trigger.id)
                if moved_to is not None and moved_to > entry.watermark_at:
                    entry.watermark_at = moved_to
                    timetable.reschedule(entry)
                else:
                    kept.append(entry)
                    self.taken_over += 1
        return kept

    def mine(self, trigger_id: str) -> bool:
        """Whether this daemon is the trigger's owner among the current members."""
        if len(self.members) == 1:
            return True
        found = self._mine.get(trigger_id)
        if found is None:
            found = owner_of(trigger_id, self.members) == self._me
            self._mine[trigger_id] = found
        return found


def owner_of(trigger_id: str, members: Iterable[str]) -> str:
    """The member with the highest rendezvous hash for `trigger_id`."""
    return max(members, key=lambda member: _weight(member, trigger_id))


def _weight(member: str, trigger_id: str) -> bytes:
    return hashlib.blake2b(
        f"{member}\x00{trigger_id}".encode(), digest_size=8, usedforsecurity=False
    ).digest()
