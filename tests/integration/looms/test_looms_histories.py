"""Recorded histories replay to the state they were recorded with.

A history that stops folding to its expected state means the fold changed meaning:
that needs a new event version or fold version, never an edited golden file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from looms_runtime._history.events import RecordedEvent
from looms_runtime._history.fold import fold_recorded, state_from_json, state_to_json

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def load(path: Path) -> tuple[list[RecordedEvent], dict[str, Any]]:
    data = json.loads(path.read_text())
    events = [
        RecordedEvent(e["seq"], e["type"], e["version"], e["payload"], 0) for e in data["events"]
    ]
    return events, data["expected_state"]


def test_there_are_recorded_histories() -> None:
    assert len(HISTORIES) >= 3


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_recorded_history_folds_to_its_recorded_state(path: Path) -> None:
    events, expected = load(path)

    state = fold_recorded(events)

    assert state_to_json(state) == expected
    assert state_from_json(expected) == state


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_every_prefix_of_a_recorded_history_folds(path: Path) -> None:
    events, _ = load(path)

    for end in range(1, len(events) + 1):
        assert fold_recorded(events[:end]).seq == end
