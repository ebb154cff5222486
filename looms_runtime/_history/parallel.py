"""Fold rules of a Python flow's `parallel` call: branches that finish in any order.

A `parallel_started` event opens the call at the journal's end and names its
branches; each branch is then an ordinary effect whose id is `{name}#{position}`,
`position` being the call's first position plus the branch's index. A branch's
final answer (its success, its failure for good, or its stop) is kept at its index
in `ParallelState.results`; once every branch has one, the answers join the journal
in argument order, as one block. So the journal a replay reads is the same whatever
order the branches finished in, and a call never joins half-way.

A call that fails fast stops once a branch failed for good: a branch that is not
running then (never started, waiting for a retry, or left ambiguous by a crash) is
answered `cancelled` at once, and one that is running is answered by its outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from looms_runtime._history.state import STUCK, EffectState, ParallelState, RunState
from looms_runtime.errors import CorruptHistoryError

BRANCH = "branch"
"""The journal `kind` of a branch's answer."""


def opened(state: RunState, p: Mapping[str, Any]) -> RunState:
    """The state after `parallel_started`: the call holds the next positions."""
    names = tuple(str(name) for name in p["names"])
    position = int(p["position"])
    if not state.python:
        raise CorruptHistoryError("parallel_started in a run that is not a Python flow")
    if state.parallel is not None or state.effects or state.waits:
        raise CorruptHistoryError("parallel_started while another call is outstanding")
    if position != len(state.journal) or not names:
        raise CorruptHistoryError(
            f"parallel call of {len(names)} branches at position {position}, "
            f"the journal holds {len(state.journal)}"
        )
    max_parallel = int(p["max_parallel"])
    if max_parallel < 1:
        raise CorruptHistoryError(f"parallel call with max_parallel {max_parallel}")
    group = ParallelState(
        position=position,
        names=names,
        fail_fast=bool(p["fail_fast"]),
        max_parallel=max_parallel,
        results=(None,) * len(names),
    )
    return dataclasses.replace(state, parallel=group)


def check_branch_dispatch(state: RunState, p: Mapping[str, Any]) -> None:
    """A first attempt dispatched while a call is open must be one of its branches,
    not yet answered, under its own name."""
    group = state.parallel
    assert group is not None  # noqa: S101 - the caller checks
    index = int(p["step_index"]) - group.position
    if p.get("branch_of") != group.position or not 0 <= index < len(group.names):
        raise CorruptHistoryError(
            f"effect {p['effect_id']!r} dispatched outside the open parallel call "
            f"at position {group.position}"
        )
    if group.names[index] != p.get("name") or group.results[index] is not None:
        raise CorruptHistoryError(
            f"effect {p['effect_id']!r} is not a pending branch of the parallel call"
        )


def answered(
    state: RunState, effect: EffectState, *, ok: bool, cancelled: bool = False, **fields: Any
) -> RunState:
    """The state after a branch got its final answer; the call joins once all have one."""
    group = state.parallel
    assert group is not None  # noqa: S101 - the caller checks
    index = effect.step_index - group.position
    entry = _entry(group, index, ok=ok, cancelled=cancelled, **fields)
    effects = {k: v for k, v in state.effects.items() if k != effect.effect_id}
    state = dataclasses.replace(state, effects=effects, parallel=_with(group, index, entry))
    return settle(state)


def settle(state: RunState) -> RunState:
    """Answer what a stopping call no longer runs, and join a call every branch answered."""
    group = state.parallel
    if group is None:
        return state
    if group.stopping:
        state, group = _stop_idle(state, group)
    if any(entry is None for entry in group.results):
        return state
    entries = tuple(entry for entry in group.results if entry is not None)
    return dataclasses.replace(
        state,
        parallel=None,
        journal=(*state.journal, *entries),
        completed_steps=state.completed_steps + len(entries),
    )


def _stop_idle(state: RunState, group: ParallelState) -> tuple[RunState, ParallelState]:
    by_index = {effect.step_index - group.position: effect for effect in state.effects.values()}
    effects = dict(state.effects)
    for index, entry in enumerate(group.results):
        effect = by_index.get(index)
        if entry is not None or (effect is not None and effect.status == "dispatched"):
            continue
        why = "not started" if effect is None else _idle_why(effect)
        attempts = 0 if effect is None else effect.attempt
        reason = f"{why}: the parallel call stopped after a branch failed"
        stopped = _entry(group, index, ok=False, cancelled=True, error=reason, attempts=attempts)
        group = _with(group, index, stopped)
        if effect is not None:
            del effects[effect.effect_id]
    return dataclasses.replace(state, effects=effects, parallel=group), group


def _idle_why(effect: EffectState) -> str:
    if effect.status in STUCK:
        return f"attempt {effect.attempt} {effect.status}"
    return f"waiting for attempt {effect.attempt + 1}"


def _entry(
    group: ParallelState, index: int, *, ok: bool, cancelled: bool, **fields: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": BRANCH,
        "name": group.names[index],
        "of": len(group.names),
        "ok": ok,
    }
    if cancelled:
        entry["cancelled"] = True
    return entry | fields


def _with(group: ParallelState, index: int, entry: Mapping[str, Any]) -> ParallelState:
    results = (*group.results[:index], entry, *group.results[index + 1 :])
    return dataclasses.replace(group, results=results)
