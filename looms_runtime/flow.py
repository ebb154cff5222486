"""Durable Python flows: the API a flow function is written against.

A flow is a function `build(ctx: FlowContext, input) -> result`, registered as
`{"kind": "python", "ref": "package.module:build"}`. Its code runs from the top
each time the run resumes (after a crash, a sleep, a signal or a retry's backoff);
every call through `ctx` is recorded in the run's log the first time and answered
from the log afterwards, so a step that completed never runs again:

    def build(ctx: FlowContext, input: dict) -> dict:
        rows = ctx.step("extract", extract, input["day"], idempotent=True)
        ctx.sleep(timedelta(minutes=5))
        approval = ctx.wait_signal("approved", timeout=timedelta(hours=8))
        return ctx.step("publish", publish, rows, approval, retry=Retry(max_attempts=3))

Rules a flow keeps, so that a replay takes the same path as the first run:

- Side effects, time, randomness and ids go through `ctx` (`step`, `now`, `new_id`);
  everything else in the function is plain, deterministic code.
- Calls through `ctx` happen in the same order with the same names on every replay;
  a replay that asks for another call than the log recorded at that position fails
  the run with `NondeterminismError` (LMS-106).
- Step arguments and results are JSON values (results are stored in the log).
- One thread: `ctx` is not shared with threads the flow starts. The exceptions the
  runtime uses to stop a replay derive from `BaseException`; do not catch those.

Each step is two-phase: its `effect_dispatched` event is committed before the
function is called and its outcome after, so a step found in flight after a crash
is `ambiguous`: run again once if it was declared `idempotent=True`, otherwise the
run parks until an operator calls `retry_effect` (or cancels it).

Steps run concurrently as the branches of one `parallel` call, which returns once
every branch finished (the join), their results in argument order:

    a, b = ctx.parallel(ctx.branch("dump-a", dump, "a"), ctx.branch("dump-b", dump, "b"))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from looms_runtime._history.definitions import DEFAULT_MAX_PARALLEL, RetryPolicy

T = TypeVar("T")


class StepFailedError(Exception):
    """A step of the flow failed for good (its retries, if any, are used up).

    Raised into the flow function, which may handle it; uncaught, it fails the run.
    The same error is raised again, from the log, on every replay.
    """

    def __init__(self, step: str, error: str | None, attempts: int) -> None:
        plural = "s" if attempts != 1 else ""
        super().__init__(f"step {step!r} failed after {attempts} attempt{plural}: {error}")
        self.step = step
        self.error = error
        self.attempts = attempts


class WaitTimeoutError(TimeoutError):
    """`wait_signal` reached its timeout before the signal arrived."""

    def __init__(self, signal: str) -> None:
        super().__init__(f"timed out waiting for signal {signal!r}")
        self.signal = signal


class NonRetryableError(Exception):
    """Raised by a step function: this failure is final, whatever the retry policy says."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Branch:
    """A step to run as a branch of `FlowContext.parallel` (made by `FlowContext.branch`).

    Making one records nothing: the branch is a step of the `parallel` call it is
    given to.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    idempotent: bool
    retry: RetryPolicy | None
    non_retryable: tuple[type[BaseException], ...]
    timeout_s: float | None


class FlowSession(Protocol):
    """What a `FlowContext` asks of the engine's session that runs the flow (its replay)."""

    run_id: str
    flow_version: str | None

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        idempotent: bool,
        retry: RetryPolicy | None,
        non_retryable: tuple[type[BaseException], ...],
        timeout_s: float | None,
    ) -> Any: ...

    def parallel(
        self, branches: tuple[Branch, ...], *, max_parallel: int, fail_fast: bool
    ) -> list[Any]: ...

    def sleep(self, seconds: float) -> None: ...

    def wait_signal(self, name: str, timeout_s: float | None) -> Any: ...

    def now(self) -> datetime: ...

    def new_id(self) -> str: ...


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """A step's retry policy: capped exponential backoff, durable across restarts.

    Attributes:
        max_attempts: the first attempt plus retries.
        backoff: the wait after the first failure; it doubles after each one.
        max_backoff: the longest wait between attempts.
        non_retryable: exception types that end the step at once.
        deadline: no retry starts this long after the first attempt was dispatched.
    """

    max_attempts: int = 3
    backoff: timedelta | float = 1.0
    max_backoff: timedelta | float = 300.0
    non_retryable: tuple[type[BaseException], ...] = ()
    deadline: timedelta | float | None = None

    def policy(self) -> RetryPolicy:
        """The runtime's form of this policy.

        Raises:
            ValueError: a value is out of range.
        """
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        backoff, cap = _seconds(self.backoff), _seconds(self.max_backoff)
        deadline = None if self.deadline is None else _seconds(self.deadline)
        if backoff < 0 or cap < 0 or (deadline is not None and deadline <= 0):
            raise ValueError("backoff and max_backoff must be >= 0, deadline > 0")
        return RetryPolicy(
            max_attempts=self.max_attempts,
            backoff_s=backoff,
            max_backoff_s=cap,
            deadline_s=deadline,
        )


class FlowContext:
    """What a durable Python flow function gets as its first argument.

    Every method records its answer in the run's log the first time and returns the
    recorded answer on every replay (see the module docstring).
    """

    __slots__ = ("_session",)

    def __init__(self, session: FlowSession) -> None:
        self._session = session

    @property
    def run_id(self) -> str:
        """The run's id (stable across replays)."""
        return self._session.run_id

    @property
    def flow_version(self) -> str | None:
        """The `version` label of the flow definition the run started on, if it has one.

        Branch on it to keep older runs replaying the code path they recorded.
        """
        return self._session.flow_version

    def step(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        idempotent: bool = False,
        retry: Retry | None = None,
        timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> T:
        """Run `fn(*args, **kwargs)` once as a durable step and return its JSON result.

        A function with a parameter named `context` also gets a `StepContext` (its
        attempt, a stable idempotency key for external systems, and the cooperative
        cancel flag). `timeout` fails an attempt that runs longer (the call itself
        cannot be interrupted and finishes in the background). `idempotent`, `retry`
        and `timeout` are the step's own keywords: a function taking arguments of
        those names gets them through `functools.partial`.

        Raises:
            StepFailedError: the step failed and has no retry left.
        """
        made = self.branch(
            name, fn, *args, idempotent=idempotent, retry=retry, timeout=timeout, **kwargs
        )
        return self._session.step(  # type: ignore[no-any-return]  # fn's result, through JSON
            made.name,
            made.fn,
            made.args,
            made.kwargs,
            idempotent=made.idempotent,
            retry=made.retry,
            non_retryable=made.non_retryable,
            timeout_s=made.timeout_s,
        )

    def branch(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        idempotent: bool = False,
        retry: Retry | None = None,
        timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> Branch:
        """A step for `parallel`, with the same arguments as `step`; records nothing.

        Raises:
            ValueError: `retry` holds a value out of range.
        """
        return Branch(
            name=name,
            fn=fn,
            args=args,
            kwargs=kwargs,
            idempotent=idempotent,
            retry=None if retry is None else retry.policy(),
            non_retryable=() if retry is None else retry.non_retryable,
            timeout_s=None if timeout is None else _seconds(timeout),
        )

    def parallel(
        self, *branches: Branch, max_parallel: int = DEFAULT_MAX_PARALLEL, fail_fast: bool = True
    ) -> list[Any]:
        """Run `branches` concurrently as durable steps and return their results in order.

        The call returns when every branch has finished (the join), whatever order
        they finished in. Each branch is a step of its own (two-phase, retried by its
        policy, with its own `StepContext`); the ones that start together are
        dispatched in one commit, at most `max_parallel` run at once (a branch
        waiting for a retry does not count), and the call takes one journal position
        per branch, in argument order.

        A branch that fails for good: with `fail_fast` (the default) the others are
        asked to stop (`StepContext.cancel_requested`; one that has not started does
        not start) and, once none runs any more, the call raises; without it the
        others finish first. A cancel of the run stops every branch.

        Raises:
            StepFailedError: a branch failed for good: the first by position (or, when
                none failed of its own, the first that was stopped).
            ValueError: `max_parallel` is below 1, or an argument is not a `Branch`.
        """
        if max_parallel < 1:
            raise ValueError("max_parallel must be >= 1")
        if not all(isinstance(branch, Branch) for branch in branches):
            raise ValueError("parallel takes branches made by ctx.branch(...)")
        return self._session.parallel(branches, max_parallel=max_parallel, fail_fast=fail_fast)

    def sleep(self, duration: timedelta | float) -> None:
        """Sleep durably: the run holds no thread meanwhile and a restart waits only the rest."""
        self._session.sleep(_seconds(duration))

    def wait_signal(self, name: str, *, timeout: timedelta | float | None = None) -> Any:
        """Wait for the signal `name` (sent with `Runtime.signal`) and return its payload.

        A signal sent before the flow waits is kept until it does.

        Raises:
            WaitTimeoutError: `timeout` passed first.
        """
        return self._session.wait_signal(name, None if timeout is None else _seconds(timeout))

    def now(self) -> datetime:
        """The current instant (aware UTC), recorded so a replay sees the same value."""
        return self._session.now()

    def new_id(self) -> str:
        """A new random UUID string, recorded so a replay sees the same value."""
        return self._session.new_id()
