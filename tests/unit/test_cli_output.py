"""What the CLI prints: step output read from events, status verdicts, and no locals ever."""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog

from looms_runtime.host import ProcessId
from triggers.inspection import StatusReport, daemon_views
from triggers.log import configure_logging
from triggers.step_output import attempt_outputs, tail
from triggers.store.protocol import Heartbeat

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class FakeEvent:
    type: str
    payload: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = T0


def test_each_attempt_gets_its_outcome_and_output_in_dispatch_order() -> None:
    out = {"stdout": "hi\n", "stderr": "oops\n", "exit_code": 3, "stderr_truncated_bytes": 10}
    events = [
        FakeEvent("run_started"),
        FakeEvent("effect_dispatched", {"effect_id": "a", "attempt": 1}),
        FakeEvent(
            "effect_failed", {"effect_id": "a", "attempt": 1, "error": "exit code 3", "output": out}
        ),
        FakeEvent("effect_dispatched", {"effect_id": "a", "attempt": 2}),
        FakeEvent("effect_dispatched", {"effect_id": "b", "attempt": 1}),
        FakeEvent("effect_succeeded", {"effect_id": "b", "attempt": 1, "output": {"stdout": "ok"}}),
    ]

    found = attempt_outputs(events)

    assert [(a.effect_id, a.attempt, a.outcome) for a in found] == [
        ("a", 1, "failed"),
        ("a", 2, "running"),
        ("b", 1, "succeeded"),
    ]
    first = found[0].to_json()
    assert (first["stderr"], first["exit_code"], first["stderr_truncated_bytes"]) == (
        "oops\n",
        3,
        10,
    )
    assert found[1].to_json()["stdout"] == ""


def test_an_attempt_is_shown_at_when_it_ended_not_when_a_restart_recorded_it() -> None:
    ended = T0 - timedelta(seconds=23)
    out = {"stdout": "done\n", "duration_ms": 45031, "ended_at_ms": int(ended.timestamp() * 1000)}
    events = [
        FakeEvent("effect_dispatched", {"effect_id": "a", "attempt": 1}, T0 - timedelta(minutes=1)),
        FakeEvent("effect_succeeded", {"effect_id": "a", "attempt": 1, "output": out}),
    ]

    [found] = attempt_outputs(events)

    assert (found.at, found.recorded_at) == (ended, T0)
    assert found.to_json()["at"] == "2025-12-31T23:59:37.000Z"


def test_an_end_later_than_its_record_is_shown_at_the_record() -> None:
    late = int((T0 + timedelta(hours=1)).timestamp() * 1000)  # another clock, ahead
    events = [
        FakeEvent("effect_dispatched", {"effect_id": "a", "attempt": 1}),
        FakeEvent(
            "effect_ambiguous", {"effect_id": "a", "attempt": 1, "output": {"ended_at_ms": late}}
        ),
    ]

    [found] = attempt_outputs(events)

    assert found.at == T0


def test_a_tail_is_the_last_non_empty_lines() -> None:
    assert tail("a\n\nb\nc\n\n", lines=2) == ["b", "c"]


def beat(owner: str, *, age: timedelta, stopped: bool = False) -> Heartbeat:
    return Heartbeat(
        owner=owner,
        host="h",
        pid=1,
        version="1",
        started_at=T0 - timedelta(days=1),
        last_tick_at=T0 - age,
        stopped_at=T0 - age if stopped else None,
    )


def test_daemons_are_alive_stale_or_stopped() -> None:
    views = daemon_views(
        [
            beat("fresh", age=timedelta(seconds=3)),
            beat("silent", age=timedelta(seconds=60)),
            beat("clean", age=timedelta(seconds=3), stopped=True),
        ],
        now=T0,
        poll_interval=timedelta(seconds=5),
    )

    assert [(v.beat.owner, v.state) for v in views] == [
        ("fresh", "alive"),
        ("silent", "stale"),
        ("clean", "stopped"),
    ]


def test_a_daemon_killed_a_moment_ago_on_this_host_is_stale_not_alive() -> None:
    here = ProcessId.current()
    dead = subprocess.Popen(["true"])
    dead.wait()
    fresh = timedelta(seconds=1)
    killed = replace(
        beat("killed", age=fresh), pid=dead.pid, boot_id=here.boot, process_start=here.started
    )
    running = replace(
        beat("running", age=fresh), pid=here.pid, boot_id=here.boot, process_start=here.started
    )
    elsewhere = replace(beat("elsewhere", age=fresh), pid=dead.pid, boot_id="another-boot")

    views = daemon_views([killed, running, elsewhere], now=T0, poll_interval=timedelta(seconds=5))

    assert [(v.beat.owner, v.state) for v in views] == [
        ("killed", "stale"),
        ("running", "alive"),
        ("elsewhere", "alive"),  # another host's process cannot be judged from here
    ]


def test_status_needs_attention_without_a_live_daemon_or_with_a_parked_run() -> None:
    alive = daemon_views([beat("a", age=timedelta(0))], now=T0, poll_interval=timedelta(seconds=5))
    stale = daemon_views(
        [beat("a", age=timedelta(hours=1))], now=T0, poll_interval=timedelta(seconds=5)
    )

    def report(daemons: Any, parked: list[Any]) -> StatusReport:
        return StatusReport(daemons=daemons, triggers={}, occurrences={}, parked_runs=parked)

    assert report(alive, []).problems == []
    assert report(stale, []).problems == ["no daemon is alive"]
    assert report(alive, ["run"]).problems == ["1 run(s) wait for an operator"]


def _fail_with_a_secret_local() -> None:
    secret_input = {"password": "hunter2-local"}  # noqa: F841 (a local the traceback must not show)
    raise RuntimeError("boom")


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "console"])
def test_logged_tracebacks_never_show_local_variables(
    as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(json=as_json, level="info")
    try:
        _fail_with_a_secret_local()
    except RuntimeError:
        structlog.get_logger().exception("step_crashed")
    logging.shutdown()
    err = capsys.readouterr().err

    assert "RuntimeError" in err and "boom" in err
    assert "hunter2-local" not in err
    if as_json:
        [line] = [json.loads(line) for line in err.splitlines() if "step_crashed" in line]
        assert line["exception"][0]["exc_type"] == "RuntimeError"
