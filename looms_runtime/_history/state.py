"""A run's folded state, and its snapshot form (plain JSON).

Fields that only Python flows or retry deadlines use are left out of the snapshot
form while they hold their default, so the state of a steps flow (and its digest)
is the same as it was before those fields existed: older snapshots stay usable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from looms_runtime._canonical import digest
from looms_runtime.errors import CorruptHistoryError

FOLD_VERSION = "1"
"""Bumped whenever the state's shape or a rule of `apply` changes; older snapshots are ignored."""

TERMINAL = frozenset({"completed", "failed", "cancelled"})
STUCK = frozenset({"ambiguous", "timed_out"})
PYTHON = "python"
"""`RunState.flow_kind` of a durable Python flow (whose results are kept in `journal`)."""
GRAPH = "graph"
"""`RunState.flow_kind` of a steps flow whose steps name their `needs` (kept in `done`)."""

_State = TypeVar("_State")
_FIELDS: dict[type, tuple[str, ...]] = {}


def evolve(value: _State, **changes: Any) -> _State:
    """`dataclasses.replace` for the frozen, slotted states below, at half its cost.

    A fold builds a dozen of them per run and thousands a second under load; the
    states have no `__post_init__` and no `init=False` field, so copying each field
    and setting the changed ones is what `replace` does through `__init__`.

    Raises:
        TypeError: a change names no field of the state.
    """
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    copy = object.__new__(cls)
    for name in names:
        _set(copy, name, changes.pop(name) if name in changes else getattr(value, name))
    if changes:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(changes))}")
    return copy


_set: Callable[[object, str, Any], None] = object.__setattr__


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectState:
    """An outstanding effect: dispatched, waiting to retry, stuck or finally failed.

    `name` is the step name a Python flow gave (None for steps flows, whose effect id
    is the step id); `give_up_at` is when the step's overall deadline passes;
    `supervised` is where a supervised command attempt runs (boot and root of its
    attempt directory, see `_effects.attempts`), so a later owner can tell what it did.
    """

    effect_id: str
    step_index: int
    kind: str
    idempotent: bool
    status: str
    attempt: int
    failures: int = 0
    ambiguities: int = 0
    dispatched_at: int | None = None
    deadline_at: int | None = None
    next_attempt_at: int | None = None
    last_error: str | None = None
    name: str | None = None
    give_up_at: int | None = None
    supervised: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitState:
    """A durable wait: a sleep until `until`, or a signal (with an optional deadline)."""

    wait_id: str
    step_index: int
    kind: str
    until: int | None
    signal: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelState:
    """A Python flow's `parallel` call whose branches have not all finished.

    The call takes the journal positions `position` to `position + len(names) - 1`,
    one per branch in argument order. A branch's final answer waits in `results` at
    its index until every branch has one; the whole call then joins the journal at
    once, so the journal only ever grows by complete calls, whatever order the
    branches finished in.
    """

    position: int
    names: tuple[str, ...]
    fail_fast: bool
    max_parallel: int
    results: tuple[Mapping[str, Any] | None, ...]

    @property
    def stopping(self) -> bool:
        """A branch failed for good and the call fails fast: no branch starts again."""
        return self.fail_fast and any(failed(entry) for entry in self.results)


def failed(entry: Mapping[str, Any] | None) -> bool:
    """Whether a branch's recorded answer is a failure of its own (not a stop asked of it)."""
    return entry is not None and not entry["ok"] and not entry.get("cancelled")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """Everything the planner needs to decide a run's next move.

    `journal` is a Python flow's recorded calls in order (step results, finished
    sleeps and waits, recorded values): what a replay of the flow function returns.
    """

    seq: int = 0
    status: str = "new"
    flow: str = ""
    version: str = ""
    completed_steps: int = 0
    effects: Mapping[str, EffectState] = field(default_factory=dict)
    waits: Mapping[str, WaitState] = field(default_factory=dict)
    cancel_requested: bool = False
    cancel_reason: str | None = None
    park_reason: str | None = None
    error: str | None = None
    result: Any = None
    flow_kind: str = "steps"
    journal: tuple[Mapping[str, Any], ...] = ()
    done: frozenset[int] = frozenset()
    """A graph flow's completed steps, by index."""
    failure: str | None = None
    """A graph flow's first step failure, while its other branches stop before it fails."""
    parallel: ParallelState | None = None
    """A Python flow's `parallel` call still running (its branches are its effects)."""

    @property
    def settled(self) -> bool:
        return self.status in TERMINAL

    @property
    def python(self) -> bool:
        return self.flow_kind == PYTHON

    @property
    def graph(self) -> bool:
        return self.flow_kind == GRAPH


_OPTIONAL_RUN: dict[str, Any] = {
    "flow_kind": "steps",
    "journal": (),
    "done": frozenset(),
    "failure": None,
    "parallel": None,
}
_OPTIONAL_EFFECT: dict[str, Any] = {"name": None, "give_up_at": None, "supervised": None}


def state_to_json(state: RunState) -> dict[str, Any]:
    """The snapshot form of a state (plain JSON); optional fields only when set."""
    data = dataclasses.asdict(state)
    for key, default in _OPTIONAL_RUN.items():
        if data[key] == default:
            del data[key]
    if "journal" in data:
        data["journal"] = [dict(entry) for entry in data["journal"]]
    if "done" in data:
        data["done"] = sorted(data["done"])
    if "parallel" in data:
        parallel = data["parallel"]
        parallel["names"] = list(parallel["names"])
        parallel["results"] = [None if r is None else dict(r) for r in parallel["results"]]
    for effect in data["effects"].values():
        for name, unset in _OPTIONAL_EFFECT.items():
            if effect[name] == unset:
                del effect[name]
    return data


def state_from_json(data: Mapping[str, Any]) -> RunState:
    """The state a snapshot holds.

    Raises:
        CorruptHistoryError: the snapshot does not have the state's shape.
    """
    try:
        effects = {k: EffectState(**v) for k, v in data["effects"].items()}
        waits = {k: WaitState(**v) for k, v in data["waits"].items()}
        journal = tuple(dict(entry) for entry in data.get("journal", ()))
        done = frozenset(int(index) for index in data.get("done", ()))
        parallel = _parallel_from_json(data.get("parallel"))
        fields = {k: v for k, v in data.items() if k not in _STRUCTURED}
        return RunState(
            **fields, effects=effects, waits=waits, journal=journal, done=done, parallel=parallel
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise CorruptHistoryError(f"snapshot does not match fold v{FOLD_VERSION}: {exc}") from exc


_STRUCTURED = frozenset({"effects", "waits", "journal", "done", "parallel"})


def _parallel_from_json(data: Mapping[str, Any] | None) -> ParallelState | None:
    if data is None:
        return None
    return ParallelState(
        position=int(data["position"]),
        names=tuple(str(name) for name in data["names"]),
        fail_fast=bool(data["fail_fast"]),
        max_parallel=int(data["max_parallel"]),
        results=tuple(None if r is None else dict(r) for r in data["results"]),
    )


def state_hash(state: RunState) -> str:
    """A digest of the state, stored with its snapshot to detect a corrupt or stale one."""
    return digest(state_to_json(state))
