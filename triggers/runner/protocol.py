"""The Runner contract: start, inspect and cancel runs of a durable runtime.

Calls are batch-first (a tick of a thousand fires starts a thousand runs in one
call). Every call may block; the scheduler puts a deadline on each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from triggers.clock import iso
from triggers.errors import RunnerError
from triggers.model import JsonValue, RunStatus
from triggers.store.protocol import StoreTransaction


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchRequest:
    """Start one run for one occurrence; `idempotency_key` makes retries safe."""

    idempotency_key: str
    flow: str
    flow_version: str
    input: JsonValue
    trigger_id: str
    occurrence_at: datetime

    @property
    def env(self) -> Mapping[str, str]:
        """The run's environment, as docs/yaml.md ("Steps") promises it: the trigger and the
        occurrence (RFC 3339 UTC). Made when asked: a runner that runs nothing (the
        simulation's) never asks."""
        return {
            "TRIGGERS_TRIGGER_ID": self.trigger_id,
            "TRIGGERS_OCCURRENCE": iso(self.occurrence_at),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHandle:
    """A run the runtime holds for a key; `created` is False when it already existed.

    `completed` is True when `start_within` completed the run in the same transaction
    (its flow had nothing to run): nothing will report it settling."""

    run_id: str
    created: bool
    completed: bool = False


SettledCallback = Callable[[str, RunStatus], None]
AfterCommit = Callable[[], None]


class Runner(Protocol):
    """A durable runtime as the scheduler sees it.

    `settles_ledger` is True when the runner itself records each run's settlement in
    the fire ledger, in the transaction that makes the run's final event durable (the
    embedded looms runtime on the store's own database): the ledger is then never
    stale, and the scheduler's monitor only reconciles. A runner elsewhere leaves it
    False, and the monitor records settlements as it learns of them.
    """

    settles_ledger: bool
    starts_within: bool
    """True when `start_within` starts runs inside a transaction of the store's own
    database (the embedded runtime): a fire is then one commit, its claim, ledger row
    and run start together, and needs no reservation."""

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        """Start (or find, by idempotency key) one run per request, durably.

        Returns when the starts are durable, not when the runs finish. Per request,
        the handle or the error (a conflict or unknown flow is permanent). A key that
        names a run started with another flow, version or input is refused with a
        RunnerRefusedError whose `run_id` detail names that run."""
        ...

    def start_within(
        self, tx: StoreTransaction, requests: Sequence[LaunchRequest]
    ) -> tuple[list[RunHandle | RunnerError], AfterCommit]:
        """Start runs inside `tx`, the store's open claim transaction (only when
        `starts_within`): they commit or roll back with it. Call the returned function
        once `tx` committed; it lets the runs go on (their first steps start then).

        Raises:
            RunnerError: `tx` is not a transaction this runner can start runs in (the
                embedded runtime needs the SQL store's, on its own database)."""
        ...

    def inspect(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        """The status of each run; an unknown id is `missing`."""
        ...

    def cancel(self, run_id: str) -> None:
        """Ask the run to stop (gracefully); a settled run is left as it is."""
        ...

    def subscribe(self, callback: SettledCallback) -> None:
        """Be told when a run settles, ahead of the next inspection (best effort)."""
        ...
