"""Starts effect attempts on their own threads and reports each result once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import structlog

from looms_runtime._definitions import CommandStep, EffectStep, HttpStep, PythonStep
from looms_runtime._effects.command import run_command
from looms_runtime._effects.context import CancelToken, EffectContext
from looms_runtime._effects.http import run_http
from looms_runtime._effects.python import run_python
from looms_runtime._effects.result import EffectResult
from looms_runtime._threads import ThreadPool

log = structlog.get_logger()


class EffectRunner:
    """Runs attempts outside the runs' actors: a long command holds no run worker."""

    def __init__(self) -> None:
        self._pool = ThreadPool("looms-effect", None)
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None

    def launch(
        self,
        step: EffectStep,
        ctx: EffectContext,
        on_done: Callable[[EffectResult], None],
    ) -> CancelToken:
        """Start one attempt; `on_done` gets its result on the effect's thread."""
        token = CancelToken()

        def attempt() -> None:
            try:
                result = self._run(step, ctx, token)
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

    def _run(self, step: EffectStep, ctx: EffectContext, token: CancelToken) -> EffectResult:
        if isinstance(step, CommandStep):
            return run_command(step, ctx, token, timeout_s=step.timeout_s)
        if isinstance(step, PythonStep):
            return run_python(step, ctx, token)
        if isinstance(step, HttpStep):
            return run_http(step, ctx, token, self._client())
        raise TypeError(f"no executor for {step.kind} steps")

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(follow_redirects=False)
            return self._http

    def close(self, timeout_s: float) -> bool:
        """Wait for running attempts up to `timeout_s`; True when none is left."""
        done = self._pool.shutdown(timeout_s)
        with self._lock:
            if self._http is not None:
                self._http.close()
                self._http = None
        return done
