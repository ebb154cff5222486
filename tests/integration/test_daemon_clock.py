"""One clock per process: the daemon's runtime records its events on the daemon's clock."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from looms_runtime.db import Database
from tests.clocks import FakeClock
from triggers.clock import utc
from triggers.daemon import Daemon, open_backend
from triggers.settings import Settings
from triggers.store.protocol import HistoryQuery
from triggers.store.sql import SqlTriggerStore

T0 = utc(2001, 1, 1)  # far from the wall clock, so a wall-clock instant stands out
DECLARATIONS = """\
version: 1
flows:
  noop: {steps: []}
triggers:
  - {id: once, flow: noop, at: "2001-01-01T00:01:00Z"}
"""


class HeldClock(FakeClock):
    """Fake time that moves only when the test moves it.

    Its waits are short real waits, so the daemon's threads keep turning while its
    time stands still (FakeClock's waits would race its time ahead instead)."""

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        return stop.wait(min(max(seconds, 0.0), 0.01))


def poll(check: Callable[[], bool], *, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def process_state() -> Iterator[None]:
    """The daemon installs signal handlers and a switch interval for its process."""
    handlers = {
        signum: signal.getsignal(signum)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
    }
    interval = sys.getswitchinterval()
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("process_state")
def test_daemon_runtime_records_events_on_the_daemon_clock(sqlite_url: str, tmp_path: Path) -> None:
    config = tmp_path / "triggers.yaml"
    config.write_text(DECLARATIONS)
    settings = Settings(database_url=sqlite_url, config=config, host="test-host")
    clock = HeldClock(T0)
    daemon = Daemon(settings, clock=clock)
    db = Database(sqlite_url)
    store = SqlTriggerStore(db)
    run_ids: list[str] = []
    failures: list[BaseException] = []

    def drive() -> None:
        try:
            poll(lambda: store.get_trigger("once") is not None, what="the declarations")
            clock.set(T0 + timedelta(minutes=1, seconds=1))

            def launched() -> bool:
                run_ids[:] = [r.run_id for r in store.history(HistoryQuery()) if r.run_id]
                return bool(run_ids)

            poll(launched, what="the occurrence to launch")
        except BaseException as exc:  # noqa: BLE001 (reported by the test's own thread)
            failures.append(exc)
        finally:
            daemon.stop()

    driver = threading.Thread(target=drive, name="test-driver")
    driver.start()
    try:
        assert daemon.run() == 0
    finally:
        driver.join()
        db.dispose()
    if failures:
        raise failures[0]

    backend = open_backend(settings, owner="reader")
    try:
        events = backend.runtime.get_events(run_ids[0])
    finally:
        backend.runtime.close()
        backend.close()
    assert events
    for event in events:
        assert T0 <= event.created_at <= clock.now(), (event.type, event.created_at)


@pytest.mark.usefixtures("process_state")
def test_a_starting_daemon_claims_what_is_due_before_the_api_starts(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What came due while no daemon ran is claimed before the slow parts of the start
    # (the web framework's import: a third of a second, seconds on a loaded machine):
    # the API starts only once the first tick has recorded the occurrence.
    from triggers.api._server import ApiServer

    config = tmp_path / "triggers.yaml"
    config.write_text(DECLARATIONS)
    settings = Settings(database_url=sqlite_url, config=config, host="test-host")
    db = Database(sqlite_url)
    store = SqlTriggerStore(db)
    # A first daemon applies `once` at T0 and stops; it comes due while none runs.
    first = Daemon(settings, clock=HeldClock(T0))

    def stop_once_applied() -> None:
        poll(lambda: store.get_trigger("once") is not None, what="the declarations")
        first.stop()

    stopper = threading.Thread(target=stop_once_applied)
    stopper.start()
    assert first.run() == 0
    stopper.join()
    settings = settings.model_copy(update={"api_address": "127.0.0.1:0"})
    clock = HeldClock(T0 + timedelta(minutes=1, seconds=1))  # `once` is due at the start
    daemon = Daemon(settings, clock=clock)
    seen_at_api_start: list[list[str]] = []
    start = ApiServer.start

    def recorded() -> list[str]:
        return [r.outcome.value for r in store.history(HistoryQuery(trigger_id="once"))]

    def start_after_the_claim(server: ApiServer, services: object) -> None:
        seen_at_api_start.append(recorded())
        start(server, services)  # type: ignore[arg-type]
        daemon.stop()

    monkeypatch.setattr(ApiServer, "start", start_after_the_claim)
    try:
        assert daemon.run() == 0
    finally:
        db.dispose()
    [outcomes] = seen_at_api_start
    assert outcomes and outcomes[0] in {"launched", "completed"}, outcomes
