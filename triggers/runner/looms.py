"""The Runner on the embedded `looms_runtime`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from looms_runtime import (
    LoomsError,
    RunSettled,
    Runtime,
    RunTransition,
    StartRequest,
)
from looms_runtime import RunHandle as LoomsRunHandle
from triggers.clock import Clock, iso
from triggers.errors import RunnerError
from triggers.model import RunStatus
from triggers.runner.door import runner_door, runner_error
from triggers.runner.protocol import AfterCommit, LaunchRequest, RunHandle, SettledCallback
from triggers.store.protocol import RunChange, StoreTransaction, TriggerStore
from triggers.store.sql_transaction import SqlTransaction

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

_CHANGES: dict[str, Literal["completed", "failed", "cancelled", "parked", "active"]] = {
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
    "parked": "parked",
    "active": "active",
}
"""The runtime's internal statuses a transition carries, as a `RunChange` names them."""


class LoomsRunner:
    """Runner backed by an in-process looms `Runtime`.

    Built before the runtime so that the runtime's `on_settled` can point at
    `notify` (and its `transition_hook` at `record_changes`); `attach` then hands it
    the runtime. Given the trigger store of the runtime's own database (`ledger`),
    it records each run's settlement, and whether a run blocks its trigger, inside
    the transaction that makes the run's own events durable: `settles_ledger`.
    """

    def __init__(self, *, ledger: TriggerStore | None = None, clock: Clock | None = None) -> None:
        self._runtime: Runtime | None = None
        self._callbacks: list[SettledCallback] = []
        self._ledger = ledger
        self._clock = clock
        self.settles_ledger = ledger is not None and clock is not None
        self.starts_within = ledger is not None

    def attach(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RunnerError("the looms runtime is not attached")
        return self._runtime

    def start_within(
        self, tx: StoreTransaction, requests: Sequence[LaunchRequest]
    ) -> tuple[list[RunHandle | RunnerError], AfterCommit]:
        if not isinstance(tx, SqlTransaction):
            raise RunnerError(f"the runtime starts runs only on its own database, not in {tx!r}")
        with runner_door("the runtime could not start runs"):
            outcomes, after_commit = self.runtime.start_within(tx.connection, _requests(requests))
        return [_handle(outcome) for outcome in outcomes], after_commit

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        with runner_door("the runtime could not start runs"):
            outcomes = self.runtime.start_runs(_requests(requests))
        return [_handle(outcome) for outcome in outcomes]

    def inspect(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        with runner_door("the runtime could not report run statuses"):
            found = self.runtime.statuses(run_ids)
        return {
            run_id: RunStatus(state=info.status, error=info.error) for run_id, info in found.items()
        }

    def cancel(self, run_id: str) -> None:
        with runner_door(f"the runtime could not cancel run {run_id}"):
            self.runtime.cancel(run_id, reason="superseded")

    def subscribe(self, callback: SettledCallback) -> None:
        self._callbacks.append(callback)

    def record_changes(self, conn: Connection, changes: Sequence[RunTransition]) -> None:
        """The runtime's transition hook: the ledger learns of them in the same transaction."""
        if self._ledger is None or self._clock is None:
            return
        mapped = [
            RunChange(
                trigger_id=str(change.attributes["trigger_id"]),
                run_id=change.run_id,
                state=_CHANGES[change.status],
                error=change.error,
                idempotency_key=change.idempotency_key,
            )
            for change in changes
            if change.attributes.get("trigger_id") and change.status in _CHANGES
        ]
        if mapped:
            self._ledger.record_run_changes(
                mapped, now=self._clock.now(), within=SqlTransaction(conn)
            )

    def notify(self, event: RunSettled) -> None:
        """The runtime's `on_settled` hook: tell subscribers a run stopped."""
        status = RunStatus(state=event.status, error=event.error)
        for callback in self._callbacks:
            callback(event.run_id, status)


def _requests(requests: Sequence[LaunchRequest]) -> list[StartRequest]:
    return [
        StartRequest(
            flow=request.flow,
            version=request.flow_version,
            input=request.input,
            idempotency_key=request.idempotency_key,
            env=dict(request.env),
            attributes={"trigger_id": request.trigger_id, "occurrence": iso(request.occurrence_at)},
        )
        for request in requests
    ]


def _handle(outcome: LoomsRunHandle | LoomsError) -> RunHandle | RunnerError:
    if isinstance(outcome, LoomsError):
        return runner_error(outcome)
    return RunHandle(run_id=outcome.run_id, created=outcome.created, completed=outcome.completed)
