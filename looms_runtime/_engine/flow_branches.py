"""The session's side of a `parallel` call: its branches run at once, then join.

The flow's thread runs the call: it asks the worker to record the call and the
attempts that can start (one commit), starts each granted attempt on a thread of
its own, and waits for their outcomes, which it hands to the worker (several in one
ask when they come together) along with the attempts that can start next: a branch
never started while fewer than `max_parallel` run, a retry whose backoff is over.
The worker's answer is the log's view of the call, which the session follows: it
never decides by itself that a branch is answered.

A branch waiting for its retry's backoff is waited out here while its siblings
run; when nothing runs any more and only backoffs are left, the session ends (its
thread released) and the run sleeps until the first retry is due, when a new
session replays the flow and resumes the call from the log. A crash resumes it the
same way: branches answered in the log are not run again.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from looms_runtime._cancel import CancelToken
from looms_runtime._engine.flow_asks import (
    AskBranches,
    AskDispatch,
    AskStop,
    BranchResult,
    GroupSpec,
    GroupView,
    Move,
    Reply,
    Unwind,
    effect_id_of,
)
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.state import RunState, failed
from looms_runtime.flow import Branch

MAX_WAIT_S = 30.0
"""The longest wait between two looks at the clock (it may be a test clock that jumps)."""


class BranchSession(Protocol):
    """What a `parallel` call needs of the session that runs it."""

    token: CancelToken

    def ask(self, move: Move) -> Reply: ...

    def finish(self, move: Move) -> None: ...

    def call_branch(
        self, branch: Branch, position: int, attempt: int, limit_s: float | None, token: CancelToken
    ) -> EffectResult: ...

    def spawn(self, task: Callable[[], None]) -> None: ...

    def clock_ms(self) -> int: ...


class ParallelCall:
    """One `parallel` call of a session (see the module docstring)."""

    def __init__(
        self,
        session: BranchSession,
        position: int,
        branches: Sequence[Branch],
        spec: GroupSpec,
        view: GroupView | None,
    ) -> None:
        self._session = session
        self._position = position
        self._branches = branches
        self._spec = spec
        self._opening = view is None
        self._entries: list[Mapping[str, Any] | None] = [None] * len(branches)
        self._attempts: dict[int, int] = {}
        self._retry_at: dict[int, int] = {}
        if view is not None:
            self._follow(view)
        self._running: dict[int, CancelToken] = {}
        self._done: queue.SimpleQueue[tuple[int, EffectResult]] = queue.SimpleQueue()
        self._draining = False

    def run(self) -> list[Mapping[str, Any]]:
        """Every branch's answer, in argument order, once all have one.

        Raises:
            Unwind: the session ended (a cancel or a stop), or it suspends for a backoff.
        """
        outcomes: list[tuple[int, EffectResult]] = []
        while True:
            outcomes.extend(self._drain())
            starts = self._startable()
            if self._opening or outcomes or starts:
                self._exchange(outcomes, starts)
                outcomes = []
                continue
            if all(entry is not None for entry in self._entries):
                return [entry for entry in self._entries if entry is not None]
            if not self._running:
                # Only backoffs are left: the run sleeps until the first retry is due.
                self._session.finish(AskStop("retry_wait"))
                raise Unwind(told=True)
            outcomes.extend(self._wait())

    def _exchange(
        self, outcomes: list[tuple[int, EffectResult]], starts: list[AskDispatch]
    ) -> None:
        results = tuple(BranchResult(result, self._branches[i].retry) for i, result in outcomes)
        for index, _ in outcomes:
            self._running.pop(index, None)
        opening = self._spec if self._opening else None
        self._opening = False
        verb, detail = self._session.ask(
            AskBranches(self._position, opening, results, tuple(starts))
        )
        if verb != "go" or detail is None:
            for token in self._running.values():
                token.cancel(0.0)  # nobody will record what they return
            raise Unwind(told=True)
        view: GroupView = detail["view"]
        self._follow(view)
        for start in starts:
            index = start.position - self._position
            if index in view.granted:
                self._start(index, start.attempt, view.granted[index])
            elif self._entries[index] is None:
                self._draining = True  # refused (a cancel, a closing runtime): start nothing
        if self._spec.fail_fast and any(failed(entry) for entry in self._entries):
            for token in self._running.values():
                token.cancel(0.0)

    def _follow(self, view: GroupView) -> None:
        self._entries = list(view.entries)
        self._attempts = dict(view.attempts)
        self._retry_at = dict(view.retry_at)

    def _may_start(self) -> bool:
        """Whether a branch may start now, if one is ready (capacity, nothing stopping)."""
        if self._draining or self._session.token.cancelled:
            return False
        if self._spec.fail_fast and any(failed(entry) for entry in self._entries):
            return False
        return len(self._running) < self._spec.max_parallel

    def _startable(self) -> list[AskDispatch]:
        if not self._may_start():
            return []
        now = self._session.clock_ms()
        free = self._spec.max_parallel - len(self._running)
        starts: list[AskDispatch] = []
        for index, branch in enumerate(self._branches):
            if free <= 0:
                break
            if self._entries[index] is not None or index in self._running:
                continue
            if index in self._retry_at:
                if self._retry_at[index] > now:
                    continue
                attempt = self._attempts[index] + 1
            elif index in self._attempts:
                continue  # dispatched, its outcome not seen yet
            else:
                attempt = 1
            position = self._position + index
            starts.append(
                AskDispatch(
                    branch.name,
                    position,
                    attempt,
                    branch.idempotent,
                    branch.timeout_s,
                    branch.retry,
                )
            )
            free -= 1
        return starts

    def _start(self, index: int, attempt: int, limit_s: float | None) -> None:
        session, branch = self._session, self._branches[index]
        position = self._position + index
        token = CancelToken()
        session.token.on_cancel(lambda: token.cancel(session.token.grace_s))
        self._running[index] = token
        self._attempts[index] = attempt
        self._retry_at.pop(index, None)

        def attempt_task() -> None:
            result = session.call_branch(branch, position, attempt, limit_s, token)
            self._done.put((index, result))

        try:
            session.spawn(attempt_task)
        except RuntimeError:
            # The runtime's threads are shutting down: whether it ran is for the next
            # owner to decide, as after a crash.
            effect_id = effect_id_of(branch.name, position)
            lost = EffectResult(effect_id=effect_id, attempt=attempt, ok=False, ambiguous=True)
            self._done.put((index, lost))

    def _drain(self) -> list[tuple[int, EffectResult]]:
        found: list[tuple[int, EffectResult]] = []
        while True:
            try:
                found.append(self._done.get_nowait())
            except queue.Empty:
                return found

    def _wait(self) -> list[tuple[int, EffectResult]]:
        """The next outcome; none when a retry may have come due first."""
        due = [at for i, at in self._retry_at.items() if self._entries[i] is None]
        wait = MAX_WAIT_S
        if due and self._may_start():
            wait = min(wait, max(0.001, (min(due) - self._session.clock_ms()) / 1000))
        try:
            return [self._done.get(timeout=wait)]
        except queue.Empty:
            return []


def view_of(
    state: RunState, position: int, spec: GroupSpec, granted: Mapping[int, float | None]
) -> GroupView:
    """The log's view of the `parallel` call at `position` (joined or still open)."""
    group = state.parallel
    if group is None or group.position != position:
        joined = tuple(state.journal[position : position + len(spec.names)])
        return GroupView(position=position, spec=spec, entries=joined)
    attempts: dict[int, int] = {}
    retry_at: dict[int, int] = {}
    for effect in state.effects.values():
        index = effect.step_index - position
        attempts[index] = effect.attempt
        if effect.status == "retry_wait":
            retry_at[index] = effect.next_attempt_at or 0
    return GroupView(
        position=position,
        spec=spec,
        entries=group.results,
        attempts=attempts,
        retry_at=retry_at,
        granted=dict(granted),
    )
