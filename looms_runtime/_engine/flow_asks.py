"""What a Python flow's session asks of its run's worker, and what it gets back.

Plain values: the session (`flow_session`, `flow_branches`) builds them on its
thread, the worker (`flow_host`) answers them on the run's; neither side reads the
other's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from looms_runtime._history.definitions import RetryPolicy
from looms_runtime._history.events import NewEvent
from looms_runtime._history.outcome import EffectResult


@dataclass(frozen=True, slots=True)
class Frontier:
    """A step outstanding at the journal's end when the session starts (due for a retry)."""

    name: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AskDispatch:
    name: str
    position: int
    attempt: int
    idempotent: bool
    timeout_s: float | None
    retry: RetryPolicy | None


@dataclass(frozen=True, slots=True)
class AskFailed:
    result: EffectResult
    retry: RetryPolicy | None


@dataclass(frozen=True, slots=True)
class AskWait:
    kind: str
    name: str
    position: int
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class AskFinish:
    ok: bool
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AskStop:
    reason: str


@dataclass(frozen=True, slots=True)
class AskCrashed:
    """Not the session's: its worker process died (`error` says how) while it ran."""

    error: str


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A `parallel` call as its log records it: its branches' names, in argument order."""

    names: tuple[str, ...]
    fail_fast: bool
    max_parallel: int


@dataclass(frozen=True, slots=True)
class BranchResult:
    """An attempt of a branch that returned, with the branch's retry policy."""

    result: EffectResult
    retry: RetryPolicy | None


@dataclass(frozen=True, slots=True)
class AskBranches:
    """Record branch outcomes of the `parallel` call at `position`, then start attempts.

    `opening` is the call itself, on its first ask: the worker records it with the
    first attempts, in one commit. The worker starts only the attempts the log allows
    (a branch the call stopped, or a retry not due, is left out) and answers with
    the call's `GroupView`.
    """

    position: int
    opening: GroupSpec | None
    results: tuple[BranchResult, ...]
    dispatches: tuple[AskDispatch, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupView:
    """What the log says of a `parallel` call, by branch index.

    `entries` holds each branch's final answer (None while it has none); `attempts`
    the attempt of each unanswered branch that has an effect; `retry_at` when the
    next attempt of a branch waiting for its retry is due; `granted` the attempts
    just dispatched for the session, with their time limit.
    """

    position: int
    spec: GroupSpec
    entries: tuple[Mapping[str, Any] | None, ...]
    attempts: Mapping[int, int] = field(default_factory=dict)
    retry_at: Mapping[int, int] = field(default_factory=dict)
    granted: Mapping[int, float | None] = field(default_factory=dict)


Move: TypeAlias = AskDispatch | AskFailed | AskWait | AskFinish | AskStop | AskBranches | AskCrashed
Reply: TypeAlias = tuple[str, Mapping[str, Any] | None]
"""`("go"|"raise"|"suspend"|"stop", detail)`: a dispatch's time limit, a failure to
raise (its journal entry), or a `parallel` call's `{"view": GroupView}`."""


@dataclass(frozen=True, slots=True)
class FlowAsk:
    """A session's request to its run's worker.

    `outcome` is the success of the step the session ran last, not yet recorded;
    `values` are the `now`/`new_id` answers recorded since (in call order).
    """

    session: object
    move: Move
    outcome: EffectResult | None
    values: tuple[NewEvent, ...]
    reply: Future[Reply] | None


def effect_id_of(name: str, position: int) -> str:
    """A flow step's effect id: its name and its position in the journal (unique per run)."""
    return f"{name}#{position}"


class Unwind(BaseException):
    """Ends the flow function's frame: the session is over (a wait, a cancel, a stop).

    A BaseException, so that flow code catching `Exception` does not swallow it.
    """

    def __init__(self, *, told: bool) -> None:
        super().__init__("flow session ended")
        self.told = told  # the worker already knows the session ended
