"""Starting a run's effect attempts, and stopping one under a cancel.

The engine's worker decides; this starts the attempt on the effect runner, records
where a command attempt runs (in its dispatch, for whoever owns the run next), and
hands the outcome back to the run's mailbox as an `outcome` operation.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from looms_runtime._effects.launch import EffectRunner
from looms_runtime._engine.attempts import attempt_limit_s, effect_context, supervised
from looms_runtime._engine.late import abandon_after_ms
from looms_runtime._history.fold import RunState
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.planner import Dispatch
from looms_runtime._store.loading import LoadedRun
from looms_runtime._workers.actors import Attempt, Op, Slot
from looms_runtime._workers.timers import TimerQueue

log = structlog.get_logger()


class Launches:
    """Effect attempts of the runtime's runs (see the module docstring)."""

    def __init__(
        self,
        *,
        runner: EffectRunner,
        clock_ms: Callable[[], int],
        timers: TimerQueue,
        submit: Callable[[str, Op], bool],
        env_prefix: str,
        output_limit_bytes: int,
    ) -> None:
        self._runner = runner
        self._clock_ms = clock_ms
        self._timers = timers
        self._submit = submit
        self._env_prefix = env_prefix
        self._output_limit_bytes = output_limit_bytes

    def supervised(self, decision: Dispatch) -> Dispatch:
        """A command's dispatch records where its attempt runs (see `attempts.supervised`)."""
        if decision.step.kind != "command":
            return decision
        return supervised(decision, self._runner.home.marker())

    def abandoning(self, slot: Slot, state: RunState) -> bool:
        """Whether the attempts still running under a cancel are given up now."""
        due = slot.abandon_at
        if due is None or not state.cancel_requested or not slot.running():
            return False
        return self._clock_ms() >= due and not state.settled

    def cancel_in_flight(self, slot: Slot, run: LoadedRun, state: RunState) -> None:
        """Ask everything of the run that runs now to stop, and when to give up on it."""
        for token in slot.tokens():
            token.cancel(run.cancel_grace_s)
        if slot.abandon_at is None:
            kinds = [state.effects[e].kind for e in slot.in_flight() if e in state.effects]
            after = max(
                (abandon_after_ms(kind, run.cancel_grace_s) for kind in kinds),
                default=abandon_after_ms(None, run.cancel_grace_s),
            )
            slot.abandon_at = self._clock_ms() + after
            self._timers.schedule(slot.run_id, slot.abandon_at)

    def launch(self, slot: Slot, run: LoadedRun, decision: Dispatch) -> None:
        step = decision.step
        ctx = effect_context(
            run,
            decision,
            env_prefix=self._env_prefix,
            output_limit_bytes=self._output_limit_bytes,
        )
        log.debug(
            "effect_dispatched",
            effect_id=step.id,
            kind=step.kind,
            attempt=decision.attempt,
            deadline_at=decision.deadline_at,
        )
        run_id = run.header.run_id
        slot.abandon_at = None
        timeout_s = attempt_limit_s(step.timeout_s, decision.event, self._clock_ms())
        path = None
        if step.kind == "command":
            path = self._runner.home.path(run_id, step.id, decision.attempt)
        token = self._runner.launch(
            step,
            ctx,
            lambda result: self.done(run_id, result),
            timeout_s=timeout_s,
            path=path,
        )
        slot.attempts[step.id] = Attempt(token, path)

    def done(self, run_id: str, result: EffectResult) -> None:
        self._submit(run_id, Op("outcome", result=result))
