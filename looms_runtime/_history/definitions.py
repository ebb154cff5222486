"""Flow definitions: the JSON the daemon registers, parsed into frozen values.

Validation collects every problem before refusing, so an operator fixes a file in
one pass. Unknown keys are problems too: a definition written for a newer runtime
must fail loudly here, not run with a part of it ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from looms_runtime.errors import InvalidFlowError

EFFECT_KINDS = frozenset({"command", "http", "python"})
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_HTTP_STATUSES = range(100, 600)
_MAX_EXIT_CODE = 255
_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


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
    """A step with a side effect: dispatched durably, then run, then its outcome recorded."""

    id: str
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
    kind: ClassVar[str] = "sleep"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitSignalStep:
    """Waits for a named signal; fails the run when `timeout_s` passes first."""

    id: str
    signal: str
    timeout_s: float | None = None
    kind: ClassVar[str] = "wait_signal"


StepDef: TypeAlias = CommandStep | HttpStep | PythonStep | SleepStep | WaitSignalStep


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsFlow:
    """Steps run in order, each with the run's input."""

    steps: tuple[StepDef, ...]
    kind: ClassVar[str] = "steps"


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

_COMMON = {"id", "type"}
_EFFECT = {"timeout_s", "retry", "idempotent"}
_KEYS: dict[str, set[str]] = {
    "command": _COMMON | _EFFECT | {"argv", "env", "cwd"},
    "http": _COMMON | _EFFECT | {"url", "method", "headers", "body", "expect_status"},
    "python": _COMMON | _EFFECT | {"ref"},
    "sleep": _COMMON | {"duration_s"},
    "wait_signal": _COMMON | {"signal", "timeout_s"},
}


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}")


def parse_flow(definition: Mapping[str, Any]) -> FlowDef:
    """Validate a flow definition and return its parsed form.

    Raises:
        InvalidFlowError: the definition is invalid; `details["problems"]` lists why.
    """
    problems = _Problems()
    flow = _parse(definition, problems)
    if problems.items or flow is None:
        raise InvalidFlowError(
            f"invalid flow definition ({len(problems.items)} problems)", problems=problems.items
        )
    return flow


def _parse(definition: Any, problems: _Problems) -> FlowDef | None:
    if not isinstance(definition, Mapping):
        problems.add("$", "must be an object")
        return None
    kind = definition.get("kind")
    if kind == "python":
        _unknown_keys(definition, {"kind", "ref", "version"}, "$", problems)
        ref = _ref(definition.get("ref"), "$.ref", problems)
        label = _optional_str(definition.get("version"), "$.version", problems)
        return PythonFlow(ref=ref, version=label)
    if kind != "steps":
        problems.add("$.kind", f"must be 'steps' or 'python', not {kind!r}")
        return None
    _unknown_keys(definition, {"kind", "steps"}, "$", problems)
    raw_steps = definition.get("steps")
    if not isinstance(raw_steps, list):
        problems.add("$.steps", "must be a list")
        return None
    steps: list[StepDef] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_steps):
        path = f"$.steps[{index}]"
        step = _step(raw, path, problems)
        if step is None:
            continue
        if step.id in seen:
            problems.add(f"{path}.id", f"duplicate step id {step.id!r}")
        seen.add(step.id)
        steps.append(step)
    return StepsFlow(steps=tuple(steps))


def _step(raw: Any, path: str, problems: _Problems) -> StepDef | None:
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object")
        return None
    kind = raw.get("type")
    if kind not in _KEYS:
        problems.add(f"{path}.type", f"must be one of {sorted(_KEYS)}, not {kind!r}")
        return None
    _unknown_keys(raw, _KEYS[kind], path, problems)
    step_id = raw.get("id")
    if not isinstance(step_id, str) or not step_id:
        problems.add(f"{path}.id", "must be a non-empty string")
        step_id = ""
    if kind == "sleep":
        duration = _number(raw.get("duration_s"), f"{path}.duration_s", problems, minimum=0.0)
        return SleepStep(id=step_id, duration_s=duration or 0.0)
    if kind == "wait_signal":
        signal = raw.get("signal")
        if not isinstance(signal, str) or not signal:
            problems.add(f"{path}.signal", "must be a non-empty string")
            signal = ""
        timeout = _optional_number(raw.get("timeout_s"), f"{path}.timeout_s", problems)
        return WaitSignalStep(id=step_id, signal=signal, timeout_s=timeout)
    common: dict[str, Any] = {
        "id": step_id,
        "timeout_s": _optional_number(raw.get("timeout_s"), f"{path}.timeout_s", problems),
        "retry": _retry(raw.get("retry"), f"{path}.retry", problems),
        "idempotent": _bool(raw.get("idempotent", False), f"{path}.idempotent", problems),
    }
    if kind == "command":
        return CommandStep(
            **common,
            argv=_argv(raw.get("argv"), f"{path}.argv", problems),
            env=_str_map(raw.get("env"), f"{path}.env", problems),
            cwd=_optional_str(raw.get("cwd"), f"{path}.cwd", problems),
        )
    if kind == "http":
        return _http(raw, path, common, problems)
    return PythonStep(**common, ref=_ref(raw.get("ref"), f"{path}.ref", problems))


def _http(
    raw: Mapping[str, Any], path: str, common: dict[str, Any], problems: _Problems
) -> HttpStep:
    url = raw.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        problems.add(f"{path}.url", "must be an http:// or https:// URL")
        url = ""
    method = raw.get("method") or "GET"
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        problems.add(f"{path}.method", f"must be one of {sorted(HTTP_METHODS)}")
        method = "GET"
    expect = raw.get("expect_status")
    statuses: tuple[int, ...] | None = None
    if expect is not None:
        if not isinstance(expect, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s in _HTTP_STATUSES for s in expect
        ):
            problems.add(f"{path}.expect_status", "must be a list of HTTP status codes")
        else:
            statuses = tuple(expect)
    return HttpStep(
        **common,
        url=url,
        method=method.upper(),
        headers=_str_map(raw.get("headers"), f"{path}.headers", problems),
        body=raw.get("body"),
        expect_status=statuses,
    )


def _unknown_keys(
    raw: Mapping[str, Any], allowed: set[str], path: str, problems: _Problems
) -> None:
    for key in sorted(set(raw) - allowed):
        problems.add(f"{path}.{key}", "unknown key")


def _retry(raw: Any, path: str, problems: _Problems) -> RetryPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object or null")
        return None
    allowed = {"max_attempts", "backoff_s", "max_backoff_s", "non_retryable_exit_codes"}
    _unknown_keys(raw, allowed | {"deadline_s"}, path, problems)
    attempts = raw.get("max_attempts")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
        problems.add(f"{path}.max_attempts", "must be an integer >= 1")
        attempts = 1
    backoff = _number(raw.get("backoff_s", 1.0), f"{path}.backoff_s", problems, minimum=0.0)
    cap = _number(raw.get("max_backoff_s", 300.0), f"{path}.max_backoff_s", problems, minimum=0.0)
    codes = raw.get("non_retryable_exit_codes") or []
    if not isinstance(codes, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= _MAX_EXIT_CODE for c in codes
    ):
        problems.add(f"{path}.non_retryable_exit_codes", "must be a list of exit codes (0-255)")
        codes = []
    return RetryPolicy(
        max_attempts=attempts,
        backoff_s=backoff or 0.0,
        max_backoff_s=cap or 0.0,
        non_retryable_exit_codes=tuple(codes),
        deadline_s=_optional_number(raw.get("deadline_s"), f"{path}.deadline_s", problems),
    )


def _number(raw: Any, path: str, problems: _Problems, *, minimum: float) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        problems.add(path, "must be a number")
        return None
    if raw < minimum:
        problems.add(path, f"must be >= {minimum:g}")
        return None
    return float(raw)


def _optional_number(raw: Any, path: str, problems: _Problems) -> float | None:
    if raw is None:
        return None
    value = _number(raw, path, problems, minimum=0.0)
    if value is not None and value <= 0:
        problems.add(path, "must be > 0 or null")
        return None
    return value


def _bool(raw: Any, path: str, problems: _Problems) -> bool:
    if not isinstance(raw, bool):
        problems.add(path, "must be true or false")
        return False
    return raw


def _optional_str(raw: Any, path: str, problems: _Problems) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        problems.add(path, "must be a non-empty string or null")
        return None
    return raw


def _argv(raw: Any, path: str, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
        problems.add(path, "must be a non-empty list of strings")
        return ()
    if not raw[0]:
        problems.add(f"{path}[0]", "the program must not be empty")
    return tuple(raw)


def _str_map(raw: Any, path: str, problems: _Problems) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        problems.add(path, "must be an object of strings")
        return {}
    return dict(raw)


def _ref(raw: Any, path: str, problems: _Problems) -> str:
    if not isinstance(raw, str) or not _REF.match(raw):
        problems.add(path, "must be 'module:function'")
        return ""
    return raw
