"""sd_notify pieces: the environment taken once, the status line, the loop's progress."""

from __future__ import annotations

import os
from datetime import timedelta

from triggers.clock import utc
from triggers.notify import Notifier, status_line
from triggers.scheduler.health import LoopProgress, LoopSummary


def test_the_service_managers_variables_are_taken_and_removed() -> None:
    environ = {
        "NOTIFY_SOCKET": "@/org/freedesktop/systemd1/notify",
        "WATCHDOG_USEC": "60000000",
        "WATCHDOG_PID": str(os.getpid()),
        "PATH": "/usr/bin",
    }

    notifier = Notifier.from_environment(environ)

    assert notifier.enabled
    assert notifier.watchdog == timedelta(seconds=60)
    assert environ == {"PATH": "/usr/bin"}


def test_a_watchdog_meant_for_another_process_is_not_ours() -> None:
    environ = {"NOTIFY_SOCKET": "/run/notify", "WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "1"}

    assert Notifier.from_environment(environ).watchdog is None


def test_without_a_socket_nothing_is_sent_and_nothing_fails() -> None:
    notifier = Notifier.from_environment({})

    assert not notifier.enabled
    notifier.ready("starting")
    notifier.ping()


def _summary(**changes: object) -> LoopSummary:
    values: dict[str, object] = {
        "triggers": 3,
        "paused": 0,
        "blocked": 0,
        "next_trigger_id": "nightly",
        "next_fire_at": utc(2026, 1, 2, 2, 30),
    }
    values.update(changes)
    return LoopSummary(**values)  # type: ignore[arg-type]


def test_status_names_counts_the_next_fire_and_the_last_error() -> None:
    assert status_line(_summary()) == "3 triggers; next nightly at 2026-01-02T02:30:00.000Z"
    assert status_line(_summary(triggers=1, paused=1, blocked=1, next_fire_at=None)) == (
        "1 trigger (1 paused, 1 blocked); nothing due"
    )
    assert status_line(_summary(), error="t.yaml refused (2 problems)", stalled_s=75.2).endswith(
        "; scheduler stalled for 75s; last error: t.yaml refused (2 problems)"
    )
    assert status_line(None) == "starting"


class _Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_counts_a_stuck_tick_and_an_overrun_wait_as_stalls() -> None:
    clock = _Monotonic()
    progress = LoopProgress(clock)
    assert progress.stalled_for() == 0.0

    progress.tick_started()
    clock.now += 3
    assert progress.stalled_for() == 3.0  # inside a tick that has not returned

    progress.tick_finished(wake_in_s=5)
    clock.now += 4
    assert progress.stalled_for() == 0.0  # waiting, as planned
    clock.now += 3
    assert progress.stalled_for() == 2.0  # two seconds past the planned wake-up
    assert progress.ticks == 1
    assert progress.wait_for_tick(after=0, timeout=0)
    assert not progress.wait_for_tick(after=1, timeout=0)
