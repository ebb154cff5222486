"""Starts effect attempts (and Python flow sessions) on their own threads."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._effects.command import run_command
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.http import HttpLoop
from looms_runtime._effects.python import run_python
from looms_runtime._history.definitions import CommandStep, EffectStep, HttpStep, PythonStep
from looms_runtime._history.outcome import EffectResult
from looms_runtime._workers.pool import ThreadPool

log = structlog.get_logger()


class EffectRunner:
    """Runs attempts outside the runs' actors: a long command holds no run worker."""

    def __init__(self) -> None:
        self._pool = ThreadPool("looms-effect", None)
        self._http = HttpLoop()

    def launch(
        self,
        step: EffectStep,
        ctx: EffectContext,
        on_done: Callable[[EffectResult], None],
        *,
        timeout_s: float | None,
    ) -> CancelToken:
        """Start one attempt; `on_done` gets its result on the effect's thread.

        `timeout_s` is the attempt's own limit (its step's timeout, or less when the
        step's overall deadline comes first).
        """
        token = CancelToken()

        def attempt() -> None:
            try:
                result = self._run(step, ctx, token, timeout_s)
            except Exception as exc:
                log.exception("effect_crashed", run_id=ctx.run_id, effect_id=ctx.effect_id)
                result = EffectResult(
                    effect_id=ctx.effect_id, attempt=ctx.attempt, ok=False, error=repr(exc)
                )
            finally:
                token.close()
            on_done(result)

        self._pool.submit(attempt)
        return token

    def start(self, task: Callable[[], None]) -> None:
        """Run `task` (a Python flow session) on an effect thread."""
        self._pool.submit(task)

    def _run(
        self, step: EffectStep, ctx: EffectContext, token: CancelToken, timeout_s: float | None
    ) -> EffectResult:
        if isinstance(step, CommandStep):
            return run_command(step, ctx, token, timeout_s=timeout_s)
        if isinstance(step, PythonStep):
            return run_python(step, ctx, token, timeout_s=timeout_s)
        if isinstance(step, HttpStep):
            return self._http.run(step, ctx, token, timeout_s=timeout_s)
        raise TypeError(f"no executor for {step.kind} steps")

    def close(self, timeout_s: float) -> bool:
        """Wait for running attempts up to `timeout_s`; True when none is left."""
        done = self._pool.shutdown(timeout_s)
        self._http.close(timeout_s)
        return done
