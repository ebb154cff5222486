"""Cancelling HTTP and Python steps mid-call: the run settles `cancelled` either way.

HTTP requests are closed; Python calls see the cooperative flag in their
`StepContext`; a call that ignores it is abandoned when the grace ends, and what it
returns afterwards is recorded as `effect_outcome_late`, changing nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest, StepContext
from looms_runtime.flow import FlowContext
from tests.factories import MakeRuntime
from tests.support import wait_for

HERE = __name__
STARTED = threading.Event()
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _fresh_events() -> Iterator[None]:
    STARTED.clear()
    RELEASE.clear()
    yield
    RELEASE.set()  # never leave a step thread blocked behind a failed test


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Cancellation does not depend on the database: SQLite only."""
    return looms_sqlite_url


@pytest.fixture
def runtime(make_runtime: MakeRuntime) -> Runtime:
    started = make_runtime()
    started.start()
    return started


def patient(_value: object, context: StepContext) -> str:
    """A step that stops early when its run is cancelled."""
    STARTED.set()
    return "stopped" if context.wait_cancelled(60) else "finished"


def stubborn(*_args: object) -> str:
    """A step that ignores the cancel until the test releases it."""
    STARTED.set()
    RELEASE.wait(60)
    return "released"


def stubborn_flow(ctx: FlowContext, _data: None) -> str:
    return ctx.step("stubborn", stubborn)


def patient_flow(ctx: FlowContext, _data: None) -> str:
    ctx.step("patient", patient, None)
    return "done"


class _Hanging(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        STARTED.set()
        RELEASE.wait(60)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: requests are asserted, not logged."""


@pytest.fixture
def hanging_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hanging)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    RELEASE.set()
    httpd.shutdown()
    httpd.server_close()


def start_steps(runtime: Runtime, step: dict[str, Any]) -> str:
    version = runtime.register_flow("flow", {"kind": "steps", "steps": [step]})
    return runtime.start_run(StartRequest(flow="flow", version=version, idempotency_key="k")).run_id


def start_flow(runtime: Runtime, function: str) -> str:
    version = runtime.register_flow(function, {"kind": "python", "ref": f"{HERE}:{function}"})
    request = StartRequest(flow=function, version=version, idempotency_key=function)
    return runtime.start_run(request).run_id


def events(runtime: Runtime, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, dict(e.payload)) for e in runtime.get_events(run_id)]


def test_cancel_closes_an_http_request_in_flight(runtime: Runtime, hanging_server: str) -> None:
    run_id = start_steps(runtime, {"id": "call", "type": "http", "url": hanging_server})
    assert STARTED.wait(20)

    runtime.cancel(run_id, reason="superseded", grace=timedelta(seconds=30))

    assert runtime.wait_settled(run_id, 20).status == "cancelled"
    cancelled = [p for t, p in events(runtime, run_id) if t == "effect_cancelled"]
    assert [p["error"] for p in cancelled] == ["cancelled: the request was closed"]


def test_a_python_step_sees_the_cooperative_cancel_flag(runtime: Runtime) -> None:
    step = {"id": "wait", "type": "python", "ref": f"{HERE}:patient"}
    run_id = start_steps(runtime, step)
    assert STARTED.wait(20)

    runtime.cancel(run_id, grace=timedelta(seconds=30))

    assert runtime.wait_settled(run_id, 20).status == "cancelled"
    assert ("effect_succeeded", "stopped") in [
        (t, p.get("output")) for t, p in events(runtime, run_id)
    ]


def test_a_python_flow_step_sees_the_cooperative_cancel_flag(runtime: Runtime) -> None:
    run_id = start_flow(runtime, "patient_flow")
    assert STARTED.wait(20)

    runtime.cancel(run_id, grace=timedelta(seconds=30))

    assert runtime.wait_settled(run_id, 20).status == "cancelled"
    types = [t for t, _ in events(runtime, run_id)]
    assert types[-2:] == ["effect_succeeded", "run_cancelled"]


@pytest.mark.parametrize("shape", ["steps", "flow"])
def test_a_python_step_ignoring_the_cancel_is_abandoned_and_reports_late(
    runtime: Runtime, shape: str
) -> None:
    if shape == "steps":
        run_id = start_steps(
            runtime, {"id": "stubborn", "type": "python", "ref": f"{HERE}:stubborn"}
        )
    else:
        run_id = start_flow(runtime, "stubborn_flow")
    assert STARTED.wait(20)

    runtime.cancel(run_id, grace=timedelta(milliseconds=100))

    assert runtime.wait_settled(run_id, 20).status == "cancelled"
    abandoned = [p for t, p in events(runtime, run_id) if t == "effect_cancelled"]
    assert len(abandoned) == 1
    assert abandoned[0]["error"].startswith("abandoned: still running 0.1s after the cancel")
    RELEASE.set()
    wait_for(lambda: events(runtime, run_id)[-1][0] == "effect_outcome_late")
    late = events(runtime, run_id)[-1][1]
    assert (late["ok"], late["output"]) == (True, "released")
    assert runtime.statuses([run_id])[run_id].status == "cancelled"
