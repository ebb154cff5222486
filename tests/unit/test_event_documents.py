"""A run's events as `runs events --json` and the API print them: instants as RFC 3339."""

from __future__ import annotations

from looms_runtime.records import Event
from triggers.clock import utc
from triggers.documents import event_json


def test_the_instants_of_an_events_payload_read_as_times_to_the_millisecond() -> None:
    event = Event(
        run_id="r",
        seq=2,
        type="effect_dispatched",
        version=1,
        payload={
            "attempt": 1,
            "dispatched_at": 1796176602509,
            "deadline_at": None,
            "idempotent": False,
            "wait": {"until": 1796176662000, "signal": "approved"},
            "retries": [{"next_attempt_at": 1796176603000}],
        },
        created_at=utc(2026, 12, 1, 12, 0),
    )

    document = event_json(event)

    assert document["created_at"] == "2026-12-01T12:00:00.000Z"
    assert document["payload"] == {
        "attempt": 1,  # a count stays a number
        "dispatched_at": "2026-12-02T01:56:42.509Z",
        "deadline_at": None,
        "idempotent": False,
        "wait": {"until": "2026-12-02T01:57:42.000Z", "signal": "approved"},
        "retries": [{"next_attempt_at": "2026-12-02T01:56:43.000Z"}],
    }
