"""Python steps: a `module:function` called in-process with the run's input.

A Python call cannot be interrupted from outside. With a timeout the call runs on a
helper thread and the attempt fails when the time is up, but the call itself keeps
running in the background until it returns; steps that must stop should be commands.
Cancellation is cooperative: the step's `StepContext` says when its run is being
cancelled, and a step still running when the grace ends is abandoned by its run.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from looms_runtime._cancel import CancelToken
from looms_runtime._canonical import json_copy
from looms_runtime._effects.context import EffectContext
from looms_runtime._history.definitions import PythonStep
from looms_runtime._history.outcome import EffectResult
from looms_runtime.errors import InvalidRequestError
from looms_runtime.flow import NonRetryableError
from looms_runtime.records import StepContext

_resolved: dict[str, tuple[Callable[..., Any], bool]] = {}
_lock = threading.Lock()


def wants_context(function: Callable[..., Any]) -> bool:
    """Whether `function` takes a parameter named `context` (it then gets a StepContext)."""
    try:
        return "context" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def resolve(ref: str) -> tuple[Callable[..., Any], bool]:
    """The callable `module:attr.path` names, and whether it takes a `context` keyword."""
    with _lock:
        cached = _resolved.get(ref)
    if cached is not None:
        return cached
    module_name, _, path = ref.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in path.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{ref} is not callable")
    found = (target, wants_context(target))
    with _lock:
        _resolved[ref] = found
    return found


def run_python(
    step: PythonStep, ctx: EffectContext, token: CancelToken, *, timeout_s: float | None
) -> EffectResult:
    """Call the step's function once and report its JSON result or its exception."""
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    try:
        function, with_context = resolve(step.ref)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is this attempt's error
        return EffectResult(**ids, ok=False, error=f"cannot load {step.ref}: {exc!r}")
    context = StepContext(
        run_id=ctx.run_id,
        step_id=ctx.step_id,
        attempt=ctx.attempt,
        idempotency_key=f"{ctx.run_id}:{ctx.step_id}",
        _token=token,
    )
    args = {"context": context} if with_context else {}
    value = ctx.input
    result = call_step(lambda: function(value, **args), ids, timeout_s=timeout_s)
    # Read again (not the narrowed flag above): the cancel may have come during the call.
    if not result.ok and token.wait(0):
        return EffectResult(
            **ids, ok=False, error=result.error, output=result.output, cancelled=True
        )
    return result


def call_step(
    invoke: Callable[[], Any],
    ids: dict[str, Any],
    *,
    timeout_s: float | None,
    non_retryable: tuple[type[BaseException], ...] = (),
) -> EffectResult:
    """Call `invoke` once (on a helper thread when there is a timeout); its result as JSON.

    An exception that is a `NonRetryableError` or one of `non_retryable` makes the
    failure final.
    """
    outcome: list[EffectResult] = []
    final: tuple[type[BaseException], ...] = (NonRetryableError, *non_retryable)

    def call() -> None:
        outcome.append(_call(invoke, ids, final))

    if timeout_s is None:
        call()
        return outcome[0]
    helper = threading.Thread(target=call, name=f"looms-step-{ids['effect_id']}", daemon=True)
    helper.start()
    helper.join(timeout_s)
    if outcome:
        return outcome[0]
    return EffectResult(**ids, ok=False, error=f"timed out after {timeout_s:g}s")


def _call(
    invoke: Callable[[], Any], ids: dict[str, Any], final: tuple[type[BaseException], ...]
) -> EffectResult:
    try:
        returned = invoke()
    except Exception as exc:  # noqa: BLE001 - the step's own failure, recorded as its outcome
        tail = "".join(traceback.format_exception(exc)[-3:])[-4000:]
        error = f"{type(exc).__name__}: {exc}"
        retryable = not isinstance(exc, final)
        return EffectResult(
            **ids, ok=False, error=error, output={"traceback": tail}, retryable=retryable
        )
    try:
        return EffectResult(**ids, ok=True, output=json_copy(returned))
    except InvalidRequestError as exc:
        return EffectResult(**ids, ok=False, error=f"the step returned {exc.message}")
