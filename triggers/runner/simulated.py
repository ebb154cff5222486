"""A Runner for simulations: each run lasts as long as it is told, on simulated time.

Runs start at once and end, `completed` (or `failed`, when the caller's `fails`
says so of the run's trigger and start), when their duration has elapsed; nothing
executes. Time is the simulation's elapsed time (a clock step does not make a run
shorter), handed in by the caller. While the daemon is up, the simulation calls
`settle_due` as time passes, and the runner reports each run that ended to its
subscribers, as the embedded runtime does; a run that ends while the daemon is
down is found settled by the next daemon's inspection, as a step that outlived its
daemon is.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from triggers.errors import RunnerError, RunnerRefusedError
from triggers.model import JsonValue, RunStatus
from triggers.runner.protocol import AfterCommit, LaunchRequest, RunHandle, SettledCallback
from triggers.store.protocol import StoreTransaction

Duration = Callable[[str], timedelta]
"""How long a run of the trigger of that id lasts."""
Fails = Callable[[str, datetime], bool]
"""Whether the run of the trigger of that id starting at that instant fails."""

_ACTIVE = RunStatus(state="active")
_COMPLETED = RunStatus(state="completed")
_CANCELLED = RunStatus(state="cancelled", error="cancelled")


class SimulatedRunner:
    """Runs that last `duration(request)` of elapsed time (see the module doc).

    Args:
        elapsed: the simulation's elapsed time now (not the daemon's wall clock).
        duration: how long each run of a trigger lasts, by trigger id.
        fails: whether a run fails (by trigger id and start), and with what error.
    """

    settles_ledger = False
    starts_within = True

    def __init__(
        self,
        *,
        elapsed: Callable[[], datetime],
        duration: Duration,
        fails: Fails | None = None,
        error: str = "failed",
    ) -> None:
        self._elapsed = elapsed
        self._duration = duration
        self._fails = fails
        self._failing: set[str] = set()
        self.failed_starts: list[tuple[str, datetime]] = []
        """The runs `fails` failed: their trigger and start, in order."""
        self._failed = RunStatus(state="failed", error=error)
        self._runs: dict[str, RunStatus] = {}
        self._keys: dict[str, tuple[str, tuple[str, str, JsonValue]]] = {}
        self._ends: list[tuple[datetime, int, str]] = []
        self._callbacks: list[SettledCallback] = []
        self.started = 0

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        results: list[RunHandle | RunnerError] = []
        now = self._elapsed()
        keys, runs, ends, duration = self._keys, self._runs, self._ends, self._duration
        for request in requests:
            known = keys.get(request.idempotency_key)
            if known is not None:
                run_id, started_as = known
                if started_as != (request.flow, request.flow_version, request.input):
                    # As the runtime does: the key names its run, refused for another identity.
                    results.append(
                        RunnerRefusedError(
                            f"idempotency key {request.idempotency_key!r} names run {run_id} "
                            "started with another flow or input",
                            run_id=run_id,
                        )
                    )
                else:
                    results.append(RunHandle(run_id=run_id, created=False))
                continue
            started = self.started = self.started + 1
            run_id = f"sim-{started}"
            keys[request.idempotency_key] = (
                run_id,
                (request.flow, request.flow_version, request.input),
            )
            runs[run_id] = _ACTIVE
            if self._fails is not None and self._fails(request.trigger_id, now):
                self._failing.add(run_id)
                self.failed_starts.append((request.trigger_id, now))
            heapq.heappush(ends, (now + duration(request.trigger_id), started, run_id))
            results.append(RunHandle(run_id=run_id, created=True))
        return results

    def start_within(
        self, tx: StoreTransaction, requests: Sequence[LaunchRequest]
    ) -> tuple[list[RunHandle | RunnerError], AfterCommit]:
        """`start`, answering at once: nothing of it lives in the store."""
        return self.start(requests), _nothing

    def inspect(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        self._end_due(self._elapsed(), report=False)
        return {run_id: self._runs.get(run_id, RunStatus(state="missing")) for run_id in run_ids}

    def cancel(self, run_id: str) -> None:
        if self._runs.get(run_id) is not _ACTIVE:
            return
        self._runs[run_id] = _CANCELLED
        self._report(run_id, _CANCELLED)

    def subscribe(self, callback: SettledCallback) -> None:
        self._callbacks.append(callback)

    def restart(self) -> None:
        """A new daemon: the runtime forgets the old one's subscribers (its runs go on)."""
        self._callbacks.clear()

    def next_end(self) -> datetime | None:
        """When the next active run ends (elapsed time), or None."""
        while self._ends and self._runs.get(self._ends[0][2]) is not _ACTIVE:
            heapq.heappop(self._ends)
        return self._ends[0][0] if self._ends else None

    def settle_due(self, now: datetime) -> int:
        """End the runs due by `now` (elapsed time) and report each; returns how many."""
        return self._end_due(now, report=True)

    def active(self) -> int:
        return sum(status is _ACTIVE for status in self._runs.values())

    def _end_due(self, now: datetime, *, report: bool) -> int:
        ended = 0
        while self._ends and self._ends[0][0] <= now:
            _, _, run_id = heapq.heappop(self._ends)
            if self._runs.get(run_id) is not _ACTIVE:
                continue
            status = self._failed if run_id in self._failing else _COMPLETED
            self._runs[run_id] = status
            ended += 1
            if report:
                self._report(run_id, status)
        return ended

    def _report(self, run_id: str, status: RunStatus) -> None:
        for callback in self._callbacks:
            callback(run_id, status)


def _nothing() -> None:
    """After the commit: nothing to let go on."""
