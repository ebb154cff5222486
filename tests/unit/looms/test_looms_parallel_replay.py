"""Replaying a `parallel` call from its journal: the recorded join, and the determinism check.

The session runs the flow function against a recorded journal and a `submit` that
answers nothing, so every call must be answered from the log (no thread starts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from looms_runtime._engine.flow_asks import AskFinish, FlowAsk, GroupSpec, GroupView
from looms_runtime._engine.flow_session import FlowSession
from looms_runtime.flow import FlowContext, StepFailedError

HERE = __name__


def dump(name: str) -> str:
    raise AssertionError(f"a replay ran {name}")  # every answer must come from the log


def flow(ctx: FlowContext, shape: dict[str, Any]) -> Any:
    """Asks for the calls `shape` describes: `parallel` of names, or a `step`."""
    out: list[Any] = []
    for call in shape["calls"]:
        if call[0] == "step":
            out.append(ctx.step(call[1], dump, call[1]))
            continue
        branches = [ctx.branch(name, dump, name) for name in call[1]]
        try:
            out.append(ctx.parallel(*branches))
        except StepFailedError as exc:
            out.append(f"failed: {exc.step}")
    return out


def branch(name: str, of: int, *, ok: bool = True, **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": "branch", "name": name, "of": of, "ok": ok}
    return entry | ({"output": f"{name}!"} if ok else {"attempts": 1} | fields)


def replay(
    journal: Sequence[Mapping[str, Any]], calls: list[Any], group: GroupView | None = None
) -> AskFinish:
    asks: list[FlowAsk] = []

    def submit(ask: FlowAsk) -> bool:
        asks.append(ask)
        return False

    FlowSession(
        run_id="replay",
        ref=f"{HERE}:flow",
        input_json=json.dumps({"calls": calls}),
        journal=tuple(journal),
        frontier=None,
        flow_version=None,
        clock_ms=lambda: 0,
        submit=submit,
        group=group,
    ).run()
    [last] = asks
    assert isinstance(last.move, AskFinish)
    return last.move


def test_a_joined_call_returns_its_recorded_results_in_argument_order() -> None:
    journal = [branch("a", 2), branch("b", 2), {"kind": "step", "name": "c", "ok": True}]

    finished = replay(journal, [["parallel", ["a", "b"]], ["step", "c"]])

    assert finished == AskFinish(ok=True, result=[["a!", "b!"], None])


def test_a_joined_call_raises_for_its_first_failed_branch_by_position() -> None:
    journal = [
        branch("a", 3, ok=False, cancelled=True, error="stopped"),
        branch("b", 3, ok=False, error="disk full"),
        branch("c", 3, ok=False, error="late failure"),
    ]

    finished = replay(journal, [["parallel", ["a", "b", "c"]]])

    assert finished == AskFinish(ok=True, result=["failed: b"])  # a was only stopped


@pytest.mark.parametrize(
    ("calls", "asked", "recorded"),
    [
        ([["parallel", ["a", "c"]]], "parallel ['a', 'c']", "parallel ['a', 'b']"),
        ([["parallel", ["b", "a"]]], "parallel ['b', 'a']", "parallel ['a', 'b']"),
        ([["parallel", ["a"]]], "parallel ['a']", "parallel ['a', 'b']"),
        ([["step", "a"]], "step 'a'", "parallel ['a', 'b']"),
    ],
    ids=["renamed", "reordered", "fewer", "a-step"],
)
def test_a_replay_that_asks_for_another_call_is_nondeterministic(
    calls: list[Any], asked: str, recorded: str
) -> None:
    journal = [branch("a", 2), branch("b", 2)]

    finished = replay(journal, calls)

    assert not finished.ok
    assert f"asked for {asked}; the log recorded {recorded}" in (finished.error or "")
    assert "LMS-106" in (finished.error or "")


def test_a_parallel_call_where_steps_were_recorded_is_nondeterministic() -> None:
    journal = [{"kind": "step", "name": "a", "ok": True}, {"kind": "step", "name": "b", "ok": True}]

    finished = replay(journal, [["parallel", ["a", "b"]]])

    assert "asked for parallel ['a', 'b']; the log recorded step 'a'" in (finished.error or "")


OPEN = GroupView(
    position=0,
    spec=GroupSpec(names=("a", "b"), fail_fast=True, max_parallel=4),
    entries=(None, None),
)


@pytest.mark.parametrize(
    ("calls", "problem"),
    [
        ([["parallel", ["a", "x"]]], "asked for parallel ['a', 'x']; the log recorded parallel"),
        ([["step", "a"]], "asked for step 'a'; the log recorded parallel ['a', 'b']"),
        ([], "the flow returned after 0 calls"),
    ],
    ids=["renamed", "a-step", "returned-early"],
)
def test_a_replay_must_reach_the_open_call_as_recorded(calls: list[Any], problem: str) -> None:
    finished = replay([], calls, group=OPEN)

    assert not finished.ok
    assert problem in (finished.error or "")
