"""Which daemons are gone: their launch reservations may be taken without waiting.

A daemon's reservations (occurrences it claimed and is starting) are leased for as
long as a start may take. When the daemon is known to be gone they are taken at
once: it stopped (its last heartbeat says so), its process is provably dead on this
host (`Host.gone`: same boot, no such process), or it stopped ticking more than the
owner lease ago on another host. A daemon wrongly taken for gone loses nothing: the
retried start reuses the occurrence's key, and the runtime answers with the same run.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from triggers.store.protocol import Heartbeat


class Host(Protocol):
    """What this daemon's host can tell of processes (see `looms_runtime.host`)."""

    @property
    def boot_id(self) -> str | None:
        """This boot of this host, recorded in the daemon's heartbeats."""
        ...

    @property
    def process_start(self) -> int | None:
        """When this daemon's process started, recorded in its heartbeats."""
        ...

    def gone(self, beat: Heartbeat) -> bool:
        """True only when the daemon of `beat` provably no longer runs here."""
        ...


class UnknownHost:
    """A host that can tell nothing of processes: only leases and heartbeats count."""

    boot_id: str | None = None
    process_start: int | None = None

    def gone(self, beat: Heartbeat) -> bool:
        return False


def gone_owners(
    beats: Iterable[Heartbeat], *, me: str, now: datetime, owner_lease: timedelta, host: Host
) -> list[str]:
    """The owners, other than `me`, whose reservations may be taken now."""
    return [
        beat.owner
        for beat in beats
        if beat.owner != me
        and (
            beat.stopped_at is not None or host.gone(beat) or now - beat.last_tick_at > owner_lease
        )
    ]
