"""HTTP steps: one request per attempt, its status checked and its body kept bounded."""

from __future__ import annotations

from typing import Any

import httpx

from looms_runtime._clock import monotonic
from looms_runtime._definitions import HttpStep
from looms_runtime._effects.context import CancelToken, EffectContext
from looms_runtime._effects.output import HeadBuffer
from looms_runtime._effects.result import EffectResult

_SUCCESS = range(200, 300)


def run_http(
    step: HttpStep, ctx: EffectContext, token: CancelToken, client: httpx.Client
) -> EffectResult:
    """Send the step's request once.

    A cancel requested while the request is on the wire takes effect when it returns
    (or its timeout passes): httpx offers no safe way to abort it from another thread.
    """
    ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
    if token.cancelled:
        return EffectResult(**ids, ok=False, error="cancelled before it started", cancelled=True)
    started = monotonic()
    body = HeadBuffer(ctx.output_limit_bytes)
    request: dict[str, Any] = {"headers": dict(step.headers), "timeout": step.timeout_s}
    if step.body is not None:
        request["json"] = step.body
    try:
        with client.stream(step.method, step.url, **request) as response:
            for chunk in response.iter_bytes():
                body.feed(chunk)
                if body.full:
                    break
            status = response.status_code
    except httpx.HTTPError as exc:
        return EffectResult(**ids, ok=False, error=f"{type(exc).__name__}: {exc}")
    output = {
        "status": status,
        "body": body.text(),
        "body_truncated": body.full,
        "duration_ms": round((monotonic() - started) * 1000),
    }
    expected = step.expect_status
    ok = status in expected if expected else status in _SUCCESS
    error = None if ok else f"unexpected HTTP status {status}"
    return EffectResult(**ids, ok=ok, output=output, error=error)
