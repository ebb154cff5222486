"""Flow definitions: the JSON the daemon registers, as frozen values (see `parsing`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Attempts of a step: the first plus retries, with capped exponential backoff.

    A failure that is not retryable (a command's exit code in
    `non_retryable_exit_codes`, a Python step raising `NonRetryableError`) ends the
    step at once; no retry starts `deadline_s` after the first attempt was dispatched.
    """

    max_attempts: int
    backoff_s: float
    max_backoff_s: float
    non_retryable_exit_codes: tuple[int, ...] = ()
    deadline_s: float | None = None

    def delay_ms(self, failures: int) -> int:
        """The wait after the `failures`-th failed attempt (1-based)."""
        delay = self.backoff_s * (2.0 ** max(0, failures - 1))
        return round(min(delay, self.max_backoff_s) * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectStep:
    """A step with a side effect: dispatched durably, then run, then its outcome recorded.

    `needs` names the steps it waits for (None: the step before it, as in a flow
    without any `needs`; an empty tuple: none).
    """

    id: str
    needs: tuple[str, ...] | None = None
    timeout_s: float | None = None
    retry: RetryPolicy | None = None
    idempotent: bool = False
    kind: ClassVar[str] = "effect"

    @property
    def max_attempts(self) -> int:
        return self.retry.max_attempts if self.retry else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandStep(EffectStep):
    """A subprocess: argv without a shell."""

    kind: ClassVar[str] = "command"
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    env_inherit: tuple[str, ...] = ()
    """Variables of the runtime's own environment passed on, though its step
    environment leaves them out."""
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Variables read when an attempt starts: `{"file": PATH}` or `{"credential": NAME}`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpStep(EffectStep):
    """An HTTP request; a status outside `expect_status` (default 2xx) fails the attempt."""

    kind: ClassVar[str] = "http"
    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    expect_status: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonStep(EffectStep):
    """A Python callable `module:function`, called with the run's input."""

    kind: ClassVar[str] = "python"
    ref: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SleepStep:
    """A durable sleep: a recorded wake time, so a restart waits only the remainder."""

    id: str
    duration_s: float
    needs: tuple[str, ...] | None = None
    kind: ClassVar[str] = "sleep"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSignalStep:
    """Waits for a named signal; fails the run when `timeout_s` passes first."""

    id: str
    signal: str
    timeout_s: float | None = None
    needs: tuple[str, ...] | None = None
    kind: ClassVar[str] = "wait_signal"


StepDef: TypeAlias = CommandStep | HttpStep | PythonStep | SleepStep | WaitSignalStep


DEFAULT_MAX_PARALLEL = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsFlow:
    """Steps, each with the run's input: in order, or as their `needs` allow.

    A flow in which no step names its `needs` runs its steps one after another. One
    that does is a graph: a step starts once every step it needs completed, and up to
    `max_parallel` of them run at once, each a branch of the run. When a step fails
    for good, `fail_fast` cancels the branches still running (else they finish);
    either way no new step starts, and the run fails with the first failure.
    """

    steps: tuple[StepDef, ...]
    max_parallel: int = DEFAULT_MAX_PARALLEL
    fail_fast: bool = True
    kind: ClassVar[str] = "steps"

    @property
    def graph(self) -> bool:
        """Whether any step names its `needs` (the flow then runs as a graph)."""
        return any(step.needs is not None for step in self.steps)

    def needs_of(self, index: int) -> frozenset[int]:
        """The indexes of the steps step `index` waits for."""
        step = self.steps[index]
        if step.needs is None:
            return frozenset({index - 1}) if index else frozenset()
        names = {other.id: i for i, other in enumerate(self.steps)}
        return frozenset(names[name] for name in step.needs)


@dataclass(frozen=True, slots=True, kw_only=True)
class PythonFlow:
    """A durable Python flow (`module:function` taking a context and the run's input).

    `version` is an optional label its author bumps when the code changes in a way
    that would not replay older runs; the flow reads it back as `ctx.flow_version`.
    """

    ref: str
    version: str | None = None
    kind: ClassVar[str] = "python"


FlowDef: TypeAlias = StepsFlow | PythonFlow
