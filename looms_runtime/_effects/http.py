"""HTTP steps: one request per attempt, its status checked and its body kept bounded.

Requests run on one event-loop thread shared by every HTTP step of the runtime, so
they share a connection pool and a cancel can close a request mid-flight: the
attempt's task is cancelled, which closes its connection, and the attempt reports
`cancelled` at once (a blocking client would only notice when the server answers).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

from looms_runtime._cancel import CancelToken
from looms_runtime._clock import monotonic
from looms_runtime._effects.context import EffectContext
from looms_runtime._effects.output import HeadBuffer
from looms_runtime._history.definitions import HttpStep
from looms_runtime._history.outcome import EffectResult

if TYPE_CHECKING:
    import httpx

_SUCCESS = range(200, 300)
_CLOSE_S = 5.0


class HttpLoop:
    """The event-loop thread of HTTP steps, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=loop.run_forever, name="looms-http", daemon=True
                )
                self._thread.start()
                self._loop = loop
            return self._loop

    async def _session(self) -> httpx.AsyncClient:
        if self._client is None:
            # Imported with the first HTTP step: a daemon whose flows make no request
            # never pays for it (a tenth of its start-up).
            import httpx  # noqa: PLC0415

            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    def run(
        self, step: HttpStep, ctx: EffectContext, token: CancelToken, *, timeout_s: float | None
    ) -> EffectResult:
        """Send the step's request once; a cancel closes it and reports the attempt cancelled."""
        ids: dict[str, Any] = {"effect_id": ctx.effect_id, "attempt": ctx.attempt}
        if token.cancelled:
            return EffectResult(
                **ids, ok=False, error="cancelled before it started", cancelled=True
            )
        loop = self._running_loop()
        future = asyncio.run_coroutine_threadsafe(self._send(step, ctx, timeout_s), loop)
        token.on_cancel(lambda: _cancel(future))
        try:
            return EffectResult(**ids, **future.result())
        except concurrent.futures.CancelledError:
            return EffectResult(
                **ids, ok=False, error="cancelled: the request was closed", cancelled=True
            )

    def close(self, timeout_s: float) -> None:
        """Close the connections and end the loop thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        # Requests still open would leave their effect threads waiting on a loop that
        # no longer runs: cancel them (their runs find them in flight at the next start).
        loop.call_soon_threadsafe(_cancel_all, loop)
        client, self._client = self._client, None
        if client is not None:
            import httpx  # noqa: PLC0415 - loaded already: a client exists

            closing = asyncio.run_coroutine_threadsafe(client.aclose(), loop)
            try:
                closing.result(min(timeout_s, _CLOSE_S))
            except (concurrent.futures.TimeoutError, httpx.HTTPError):
                closing.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        if not thread.is_alive():
            loop.close()

    async def _send(
        self, step: HttpStep, ctx: EffectContext, timeout_s: float | None
    ) -> dict[str, Any]:
        import httpx  # noqa: PLC0415 - loaded by the session, once

        client = await self._session()
        started = monotonic()
        body = HeadBuffer(ctx.output_limit_bytes)
        request: dict[str, Any] = {"headers": dict(step.headers), "timeout": timeout_s}
        if step.body is not None:
            request["json"] = step.body
        try:
            async with asyncio.timeout(timeout_s):
                async with client.stream(step.method, step.url, **request) as response:
                    async for chunk in response.aiter_bytes():
                        body.feed(chunk)
                        if body.full:
                            break
                    status = response.status_code
        except TimeoutError:
            return {"ok": False, "error": f"timed out after {timeout_s:g}s"}
        except httpx.HTTPError as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        output = {
            "status": status,
            "body": body.text(),
            "body_truncated": body.full,
            "duration_ms": round((monotonic() - started) * 1000),
        }
        expected = step.expect_status
        ok = status in expected if expected else status in _SUCCESS
        error = None if ok else f"unexpected HTTP status {status}"
        return {"ok": ok, "output": output, "error": error}


def _cancel(future: concurrent.futures.Future[Any]) -> None:
    # Cancelling the future cancels the request's task on the loop, closing it.
    future.cancel()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()
