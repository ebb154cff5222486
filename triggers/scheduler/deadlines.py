"""Every runner call carries a deadline.

A runtime that never answers used to hold the launch, and the tick waiting on
it, with nothing written down. Calls run on a bounded pool; a caller waits at
most its deadline. An answer that comes too late is ambiguous, so the caller
treats it as unknown (the occurrence stays pending under the same key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import TypeVar

from triggers.errors import RunnerError, RunnerTimeoutError, TriggersError
from triggers.model import RunStatus
from triggers.runner.protocol import LaunchRequest, RunHandle, Runner

T = TypeVar("T")


class DeadlineRunner:
    """A Runner whose every call gives up after its deadline."""

    def __init__(
        self,
        runner: Runner,
        *,
        concurrency: int,
        start_timeout: timedelta,
        inspect_timeout: timedelta,
        cancel_timeout: timedelta,
        inline: bool = False,
    ) -> None:
        self.runner = runner
        # Inline: the runner answers at once, so a call needs neither a thread nor a deadline.
        self._pool = (
            None
            if inline
            else ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="runner")
        )
        self._start_timeout = start_timeout.total_seconds()
        self._inspect_timeout = inspect_timeout.total_seconds()
        self._cancel_timeout = cancel_timeout.total_seconds()

    def start(self, requests: Sequence[LaunchRequest]) -> list[RunHandle | RunnerError]:
        keys = ", ".join(r.idempotency_key for r in requests[:3])
        more = f" and {len(requests) - 3} more" if len(requests) > 3 else ""  # noqa: PLR2004
        return self._call(
            lambda: self.runner.start(requests), self._start_timeout, f"start of {keys}{more}"
        )

    def inspect(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        return self._call(
            lambda: self.runner.inspect(run_ids),
            self._inspect_timeout,
            f"inspection of {len(run_ids)} runs",
        )

    def cancel(self, run_id: str) -> None:
        self._call(lambda: self.runner.cancel(run_id), self._cancel_timeout, f"cancel of {run_id}")

    def close(self) -> None:
        # Calls still running belong to the runtime; nobody waits for them now.
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _call(self, function: Callable[[], T], timeout: float, what: str) -> T:
        if self._pool is None:
            return _answer(function, what)
        future: Future[T] = self._pool.submit(function)
        try:
            return future.result(timeout=timeout)
        except FutureTimeout:
            future.cancel()
            raise RunnerTimeoutError(
                f"the runner did not answer the {what} within {timeout:g} s", timeout_s=timeout
            ) from None
        except TriggersError:
            raise
        except Exception as exc:  # a runner bug must not kill the caller
            raise RunnerError(f"the runner failed the {what}: {exc!r}") from exc


def _answer(function: Callable[[], T], what: str) -> T:
    """Call `function` here, its errors as the pool's calls give them."""
    try:
        return function()
    except TriggersError:
        raise
    except Exception as exc:  # a runner bug must not kill the caller
        raise RunnerError(f"the runner failed the {what}: {exc!r}") from exc
