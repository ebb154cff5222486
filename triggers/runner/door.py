"""The one door between `looms_runtime` and `triggers`: every runtime error translated once.

Whatever calls the runtime for `triggers` (the looms runner, the edges' reads and an
operator's requests in `triggers.runner.runs`, flow registration) goes through
`runtime_door`, so the CLI and the API see `triggers` errors only and give one error one
meaning (a temporary failure is exit 75 and HTTP 503 in both). The runtime's own code
stays in `details["runtime_code"]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from looms_runtime import errors as looms
from triggers.errors import (
    DeclarationError,
    RunConflictError,
    RunnerError,
    RunnerRefusedError,
    RunnerUnavailableError,
    RunRequestError,
    TriggersError,
    UnknownRunError,
)

_MEANINGS: tuple[tuple[type[looms.LoomsError], type[TriggersError]], ...] = (
    (looms.RunNotFoundError, UnknownRunError),
    (looms.InvalidRequestError, RunRequestError),
    (looms.EffectNotRetryableError, RunConflictError),
    (looms.SignalConflictError, RunConflictError),
    (looms.StartConflictError, RunnerRefusedError),
    (looms.UnknownFlowError, RunnerRefusedError),
    (looms.InvalidFlowError, DeclarationError),
    # A closed runtime is one whose daemon is stopping: the next daemon takes the call.
    (looms.RuntimeClosedError, RunnerUnavailableError),
)
"""The runtime's errors by what they mean to `triggers`, narrowest first."""


def translated(error: looms.LoomsError, *, doing: str | None = None) -> TriggersError:
    """The `triggers` error that says what `error` means; `doing` prefixes its message.

    A transient runtime error (`LoomsError.transient`: the same call may succeed later)
    is a `RunnerUnavailableError`; one the runtime does not classify is a `RunnerError`.
    """
    kind: type[TriggersError] = RunnerUnavailableError if error.transient else RunnerError
    for looms_kind, meaning in _MEANINGS:
        if isinstance(error, looms_kind):
            kind = meaning
            break
    message = f"{doing}: {error.message}" if doing else error.message
    return kind(message, **error.details, runtime_code=error.code)


def runner_error(error: looms.LoomsError, *, doing: str | None = None) -> RunnerError:
    """`translated(error)` where a `RunnerError` must come out (the `Runner` protocol's
    calls): a meaning outside the runner's errors is a plain `RunnerError`."""
    meaning = translated(error, doing=doing)
    if isinstance(meaning, RunnerError):
        return meaning
    return RunnerError(meaning.message, **meaning.details)


@contextmanager
def runner_door(doing: str) -> Iterator[None]:
    """`runtime_door` for the `Runner` protocol's calls: they raise `RunnerError`s."""
    try:
        yield
    except looms.LoomsError as exc:
        raise runner_error(exc, doing=doing) from exc


@contextmanager
def runtime_door(doing: str | None = None) -> Iterator[None]:
    """Run a call of the runtime; a `LoomsError` it raises leaves as `translated(...)`."""
    try:
        yield
    except looms.LoomsError as exc:
        raise translated(exc, doing=doing) from exc
