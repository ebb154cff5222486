"""Flow definitions parsed and validated: every problem collected before refusing.

Unknown keys are problems too: a definition written for a newer runtime must fail
loudly here, not run with a part of it ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from looms_runtime._history.definitions import (
    DEFAULT_MAX_PARALLEL,
    CommandStep,
    FlowDef,
    HttpStep,
    PythonFlow,
    PythonStep,
    RetryPolicy,
    SleepStep,
    StepDef,
    StepsFlow,
    WaitSignalStep,
)
from looms_runtime.errors import InvalidFlowError

HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_HTTP_STATUSES = range(100, 600)
_MAX_EXIT_CODE = 255
_REF = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")

_COMMON = {"id", "type", "needs"}
_EFFECT = {"timeout_s", "retry", "idempotent"}
_KEYS: dict[str, set[str]] = {
    "command": _COMMON | _EFFECT | {"argv", "env", "cwd", "env_inherit", "secrets"},
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


def _parse(definition: object, problems: _Problems) -> FlowDef | None:
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
    _unknown_keys(definition, {"kind", "steps", "max_parallel", "fail_fast"}, "$", problems)
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
    _check_needs(steps, problems)
    parallel = definition.get("max_parallel", DEFAULT_MAX_PARALLEL)
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        problems.add("$.max_parallel", "must be an integer >= 1")
        parallel = DEFAULT_MAX_PARALLEL
    fail_fast = _bool(definition.get("fail_fast", True), "$.fail_fast", problems)
    return StepsFlow(steps=tuple(steps), max_parallel=parallel, fail_fast=fail_fast)


def _check_needs(steps: list[StepDef], problems: _Problems) -> None:
    """Every step named in a `needs` exists, and the steps form no cycle."""
    known = {step.id for step in steps}
    if len(known) != len(steps):
        return  # duplicate ids are reported already; their needs mean nothing yet
    edges: dict[str, tuple[str, ...]] = {}
    for index, step in enumerate(steps):
        if step.needs is None:
            edges[step.id] = (steps[index - 1].id,) if index else ()
            continue
        for name in step.needs:
            if name not in known:
                problems.add(f"$.steps[{index}].needs", f"no step {name!r} in this flow")
            elif name == step.id:
                problems.add(f"$.steps[{index}].needs", "a step cannot need itself")
        edges[step.id] = tuple(n for n in step.needs if n in known and n != step.id)
    cycle = _cycle(edges)
    if cycle:
        problems.add("$.steps", f"the needs form a cycle: {' -> '.join(cycle)}")


def _cycle(edges: dict[str, tuple[str, ...]]) -> list[str]:
    """A cycle through `edges` (step -> steps it needs), as a path, or [] when none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for needed in edges.get(node, ()):
            if state.get(needed) == 1:
                return [*path[path.index(needed) :], needed]
            if needed not in state:
                found = visit(needed)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in edges:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def _step(raw: object, path: str, problems: _Problems) -> StepDef | None:
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
    needs = _needs(raw.get("needs"), f"{path}.needs", problems)
    if kind == "sleep":
        duration = _number(raw.get("duration_s"), f"{path}.duration_s", problems, minimum=0.0)
        return SleepStep(id=step_id, duration_s=duration or 0.0, needs=needs)
    if kind == "wait_signal":
        signal = raw.get("signal")
        if not isinstance(signal, str) or not signal:
            problems.add(f"{path}.signal", "must be a non-empty string")
            signal = ""
        timeout = _optional_number(raw.get("timeout_s"), f"{path}.timeout_s", problems)
        return WaitSignalStep(id=step_id, signal=signal, timeout_s=timeout, needs=needs)
    common: dict[str, Any] = {
        "id": step_id,
        "needs": needs,
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
            env_inherit=tuple(_names(raw.get("env_inherit"), f"{path}.env_inherit", problems)),
            secrets=_secrets(raw.get("secrets"), f"{path}.secrets", problems),
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


def _needs(raw: object, path: str, problems: _Problems) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        problems.add(path, "must be a list of step ids")
        return None
    if len(set(raw)) != len(raw):
        problems.add(path, "names a step twice")
    return tuple(dict.fromkeys(raw))


def _unknown_keys(
    raw: Mapping[str, Any], allowed: set[str], path: str, problems: _Problems
) -> None:
    for key in sorted(set(raw) - allowed):
        problems.add(f"{path}.{key}", "unknown key")


def _retry(raw: object, path: str, problems: _Problems) -> RetryPolicy | None:
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


def _number(raw: object, path: str, problems: _Problems, *, minimum: float) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        problems.add(path, "must be a number")
        return None
    if raw < minimum:
        problems.add(path, f"must be >= {minimum:g}")
        return None
    return float(raw)


def _optional_number(raw: object, path: str, problems: _Problems) -> float | None:
    if raw is None:
        return None
    value = _number(raw, path, problems, minimum=0.0)
    if value is not None and value <= 0:
        problems.add(path, "must be > 0 or null")
        return None
    return value


def _bool(raw: object, path: str, problems: _Problems) -> bool:
    if not isinstance(raw, bool):
        problems.add(path, "must be true or false")
        return False
    return raw


def _optional_str(raw: object, path: str, problems: _Problems) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        problems.add(path, "must be a non-empty string or null")
        return None
    return raw


def _argv(raw: object, path: str, problems: _Problems) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
        problems.add(path, "must be a non-empty list of strings")
        return ()
    if not raw[0]:
        problems.add(f"{path}[0]", "the program must not be empty")
    return tuple(raw)


def _str_map(raw: object, path: str, problems: _Problems) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        problems.add(path, "must be an object of strings")
        return {}
    return dict(raw)


def _names(raw: Any, path: str, problems: _Problems) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(name, str) and name for name in raw):
        problems.add(path, "must be a list of variable names")
        return []
    return list(raw)


def _secrets(raw: Any, path: str, problems: _Problems) -> dict[str, dict[str, str]]:
    if raw is None:
        return {}
    shape = 'must map names to {"file": PATH} or {"credential": NAME}'
    if not isinstance(raw, Mapping):
        problems.add(path, shape)
        return {}
    found: dict[str, dict[str, str]] = {}
    for name, source in raw.items():
        if not isinstance(name, str) or not isinstance(source, Mapping) or len(source) != 1:
            problems.add(path, shape)
            return {}
        [(key, value)] = source.items()
        if key not in {"file", "credential"} or not isinstance(value, str) or not value:
            problems.add(f"{path}.{name}", shape)
            return {}
        found[name] = {key: value}
    return found


def _ref(raw: object, path: str, problems: _Problems) -> str:
    if not isinstance(raw, str) or not _REF.match(raw):
        problems.add(path, "must be 'module:function'")
        return ""
    return raw
