"""A scriptable in-memory Runner for tests: runs settle when the test says so."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from triggers.errors import RunnerError, RunnerRefusedError
from triggers.model import RunStatus
from triggers.runner.protocol import AfterCommit, LaunchRequest, RunHandle, SettledCallback
from triggers.store.protocol import StoreTransaction


class FakeRunner:
    """Runner whose runs stay active until `settle` (or `auto_complete`) ends them.

    Args:
        auto_complete: settle every run as completed the moment it starts.
        fail_starts: idempotency keys whose start raises RunnerError (transiently).
        empty_flows: flows with nothing to run: `start_within` completes their runs in
            the start, as the embedded runtime does (nothing reports them settling).
    """

    settles_ledger = False

    def __init__(self, *, auto_complete: bool = False, starts_within: bool = True) -> None:
        self.auto_complete = auto_complete
        self.starts_within = starts_within
        """As the embedded runtime does (a fire in one commit); False exercises the
        launcher's reservations, as a runner off the store's database would."""
        self.fail_starts: set[str] = set()
        self.empty_flows: set[str] = set()
        self.requests: list[LaunchRequest] = []
        self.cancelled: list[str] = []
        self._runs: dict[str, RunStatus] = {}
        self._keys: dict[str, str] = {}
        self._identities: dict[str, tuple[str, str, str]] = {}
        self._callbacks: list[SettledCallback] = []
        self._lock = threading.Lock()

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        results: list[RunHandle | RunnerError] = []
        settled = []
        with self._lock:
            for request in requests:
                self.requests.append(request)
                if request.idempotency_key in self.fail_starts:
                    results.append(RunnerError(f"start of {request.idempotency_key} failed"))
                    continue
                identity = (
                    request.flow,
                    request.flow_version,
                    json.dumps(request.input, sort_keys=True),
                )
                existing = self._keys.get(request.idempotency_key)
                if existing is not None:
                    if self._identities[request.idempotency_key] != identity:
                        # As the runtime does: the key names its run, refused for another identity.
                        results.append(
                            RunnerRefusedError(
                                f"idempotency key {request.idempotency_key!r} names run "
                                f"{existing} started with another flow or input",
                                run_id=existing,
                            )
                        )
                        continue
                    results.append(RunHandle(run_id=existing, created=False))
                    continue
                run_id = f"run-{len(self._keys) + 1}"
                self._keys[request.idempotency_key] = run_id
                self._identities[request.idempotency_key] = identity
                self._runs[run_id] = RunStatus(state="active")
                if self.auto_complete:
                    self._runs[run_id] = RunStatus(state="completed")
                    settled.append(run_id)
                results.append(RunHandle(run_id=run_id, created=True))
        for run_id in settled:
            self._notify(run_id, RunStatus(state="completed"))
        return results

    def start_within(
        self, tx: StoreTransaction, requests: Sequence[LaunchRequest]
    ) -> tuple[list[RunHandle | RunnerError], AfterCommit]:
        """`start`, answering at once; the fake keeps no state in the store's database."""
        results = self.start(requests)
        for index, (request, result) in enumerate(zip(requests, results, strict=True)):
            if (
                isinstance(result, RunHandle)
                and result.created
                and request.flow in self.empty_flows
            ):
                with self._lock:
                    self._runs[result.run_id] = RunStatus(state="completed")
                results[index] = RunHandle(run_id=result.run_id, created=True, completed=True)
        return results, lambda: None

    def inspect(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        with self._lock:
            return {
                run_id: self._runs.get(run_id, RunStatus(state="missing")) for run_id in run_ids
            }

    def cancel(self, run_id: str) -> None:
        with self._lock:
            self.cancelled.append(run_id)
            current = self._runs.get(run_id)
            if current is None or current.settled:
                return
            self._runs[run_id] = RunStatus(state="cancelled", error="cancelled")
        self._notify(run_id, RunStatus(state="cancelled", error="cancelled"))

    def subscribe(self, callback: SettledCallback) -> None:
        self._callbacks.append(callback)

    def settle(self, run_id: str, state: str = "completed", error: str | None = None) -> None:
        """End a run as `completed`, `failed` or `cancelled`."""
        status = RunStatus(state=state, error=error)  # type: ignore[arg-type]  # tests pass literals
        with self._lock:
            self._runs[run_id] = status
        self._notify(run_id, status)

    def run_for(self, idempotency_key: str) -> str | None:
        with self._lock:
            return self._keys.get(idempotency_key)

    def active(self) -> list[str]:
        with self._lock:
            return [run_id for run_id, status in self._runs.items() if not status.settled]

    def _notify(self, run_id: str, status: RunStatus) -> None:
        for callback in self._callbacks:
            callback(run_id, status)
