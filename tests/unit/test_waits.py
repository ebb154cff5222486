"""What a run waits for, in words: signal waits, sleeps, a parked run's decisions, and
which signals a run refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from triggers.errors import SignalRefusedError
from triggers.waits import DECISIONS, check_signal, decision_lines, waiting_text

UNTIL = datetime(2026, 12, 2, 2, 56, tzinfo=UTC)


def wait(kind: str = "signal", signal: str | None = "approved", until: Any = UNTIL) -> Any:
    return SimpleNamespace(wait_id="gate", kind=kind, signal=signal, until=until)


def info(status: str = "active", awaited: Any = ("approved",), waits: Any = ()) -> Any:
    return SimpleNamespace(run_id="R", status=status, awaited_signals=awaited, waits=waits)


def test_a_wait_reads_with_the_command_that_ends_it() -> None:
    assert waiting_text("R", wait()) == (
        "waiting for signal 'approved' until 2026-12-02T02:56:00.000Z: "
        "triggers runs signal R approved"
    )
    assert waiting_text("R", wait(until=None)).startswith("waiting for signal 'approved': ")
    assert waiting_text("R", wait("sleep", None)) == (
        "sleeping until 2026-12-02T02:56:00.000Z (step gate)"
    )


def test_a_parked_run_names_both_decisions_and_what_each_means() -> None:
    stuck = SimpleNamespace(effect_id="dump", status="ambiguous")
    done = SimpleNamespace(effect_id="prep", status="failed")
    assert decision_lines("R", [done, stuck]) == [
        f"triggers runs retry R dump: {DECISIONS['retry']}",
        f"triggers runs cancel R: {DECISIONS['cancel']}",
    ]
    assert decision_lines("R", [done]) == []


def test_a_signal_is_taken_when_a_step_waits_for_it_now_or_later() -> None:
    check_signal(info(), "approved", events=list)
    check_signal(info(awaited=None), "anything", events=list)  # a Python flow: unknown


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (info(waits=(wait(),)), "does not wait for signal 'aproved': waiting for signal"),
        (info(), "does not wait for signal 'aproved': its flow waits later for 'approved'"),
        (info(awaited=()), "no step of its flow waits for a signal"),
        (info(status="completed", awaited=()), "run R is completed"),
    ],
)
def test_a_signal_that_would_change_nothing_is_refused(run: Any, message: str) -> None:
    with pytest.raises(SignalRefusedError) as caught:
        check_signal(run, "aproved", events=list)
    assert message in caught.value.message
    assert caught.value.exit_code == 2


def test_a_repeat_of_a_signal_a_wait_took_answers_as_the_first() -> None:
    events = [
        SimpleNamespace(type="wait_started", payload={"wait_id": "gate", "signal": "go"}),
        SimpleNamespace(type="wait_finished", payload={"wait_id": "gate", "key": "signal:k1"}),
    ]
    settled = info(status="completed", awaited=())
    check_signal(settled, "go", key="k1", events=lambda: events)
    with pytest.raises(SignalRefusedError):
        check_signal(settled, "go", key="k2", events=lambda: events)
