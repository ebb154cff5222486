"""The moves the planner answers with (pure values); the requests it reads are
`looms_runtime._history.inbox`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from looms_runtime._history.definitions import EffectStep
from looms_runtime._history.events import NewEvent


@dataclass(frozen=True, slots=True)
class Emit:
    """Append these events (and mark these inbox keys consumed); nothing runs."""

    events: tuple[NewEvent, ...]
    consumed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Commit `event` (effect_dispatched), then run the step's attempt."""

    event: NewEvent
    step: EffectStep
    attempt: int
    deadline_at: int | None


@dataclass(frozen=True, slots=True)
class FlowDispatch:
    """Commit `events` (a Python flow step's effect_dispatched, or those of the branches
    of a `parallel` call that start now, after the call's opening), then let the
    session run them."""

    events: tuple[NewEvent, ...]
    effect_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunFlow:
    """Run the Python flow's function from the top, replaying its journal."""


@dataclass(frozen=True, slots=True)
class Sleep:
    """Nothing to do before `until` (epoch ms): a timer wakes the run."""

    until: int


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do until something external happens (an outcome, a signal, an operator)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The run has settled."""


Move: TypeAlias = Emit | Dispatch | FlowDispatch | RunFlow | Sleep | Idle | Finished
