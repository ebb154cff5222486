"""Python steps: a `module:function` called in-process with the run's input.

A Python call cannot be interrupted from outside. With `timeout_s` the call runs on a
helper thread and the attempt fails when the time is up, but the call itself keeps
running in the background until it returns; steps that must stop should be commands.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import traceback
from collections.abc import Callable
from typing import Any

from looms_runtime._canonical import json_copy
from looms_runtime._definitions import PythonStep
from looms_runtime._effects.context import CancelToken, EffectContext
from looms_runtime._effects.result import EffectResult
from looms_runtime.errors import InvalidRequestError
from looms_runtime.records import StepContext

_resolved: dict[str, tuple[Callable[..., Any], bool]] = {}
_lock = threading.Lock()


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
    try:
        wants_context = "context" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        wants_context = False
    with _lock:
        _resolved[ref] = (target, wants_context)
    return target, wants_context


def run_python(step: PythonStep, ctx: EffectContext, token: CancelToken) -> EffectResult:
    """Call the step's function once and report its JSON result or its exception."""
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    try:
        function, wants_context = resolve(step.ref)
    except Exception as exc:  # noqa: BLE001 - any import-time failure is this attempt's error
        return EffectResult(**ids, ok=False, error=f"cannot load {step.ref}: {exc!r}")
    context = StepContext(
        run_id=ctx.run_id,
        step_id=ctx.step_id,
        attempt=ctx.attempt,
        idempotency_key=f"{ctx.run_id}:{ctx.step_id}",
    )
    args = {"context": context} if wants_context else {}
    outcome: list[EffectResult] = []

    def call() -> None:
        outcome.append(_call(function, ctx.input, args, ids))

    if step.timeout_s is None:
        call()
        return outcome[0]
    helper = threading.Thread(target=call, name=f"looms-python-{ctx.run_id}", daemon=True)
    helper.start()
    helper.join(step.timeout_s)
    if outcome:
        return outcome[0]
    return EffectResult(**ids, ok=False, error=f"timed out after {step.timeout_s:g}s")


def _call(
    function: Callable[..., Any], value: Any, args: dict[str, Any], ids: dict[str, Any]
) -> EffectResult:
    try:
        returned = function(value, **args)
    except Exception as exc:  # noqa: BLE001 - the step's own failure, recorded as its outcome
        tail = "".join(traceback.format_exception(exc)[-3:])[-4000:]
        error = f"{type(exc).__name__}: {exc}"
        return EffectResult(**ids, ok=False, error=error, output={"traceback": tail})
    try:
        return EffectResult(**ids, ok=True, output=json_copy(returned))
    except InvalidRequestError as exc:
        return EffectResult(**ids, ok=False, error=f"the step returned {exc.message}")
