"""Python and HTTP steps, end to end on a real runtime."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from looms_runtime import Runtime, StartRequest, StepContext
from tests.factories import MakeRuntime

HERE = __name__


def double(value: dict[str, int], context: StepContext) -> dict[str, Any]:
    """A step function: reads the run input and its context."""
    return {"doubled": value["n"] * 2, "step": context.step_id, "attempt": context.attempt}


def explode(_value: object) -> None:
    raise ValueError("no such thing")


def unserializable(_value: object) -> object:
    return {1, 2}


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Step execution does not depend on the database: SQLite only."""
    return looms_sqlite_url


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        status = int(self.path.strip("/") or "200")
        reply = json.dumps(
            {"got": json.loads(body or b"null"), "auth": self.headers.get("X-Token")}
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: requests are asserted, not logged."""


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def run(runtime: Runtime, step: dict[str, Any], run_input: Any = None) -> str:
    base = {"timeout_s": None, "retry": None, "idempotent": True}
    version = runtime.register_flow("flow", {"kind": "steps", "steps": [{**base, **step}]})
    request = StartRequest(flow="flow", version=version, input=run_input, idempotency_key="k")
    return runtime.start_run(request).run_id


def test_python_step_gets_the_input_and_its_context(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    run_id = run(runtime, {"id": "calc", "type": "python", "ref": f"{HERE}:double"}, {"n": 21})

    assert runtime.wait_settled(run_id, 10).status == "completed"
    assert runtime.inspect_run(run_id).result == {"doubled": 42, "step": "calc", "attempt": 1}


@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("explode", "ValueError: no such thing"),
        ("unserializable", "the step returned not a JSON value"),
        ("missing", "cannot load"),
    ],
)
def test_python_step_failures_fail_the_attempt(
    make_runtime: MakeRuntime, function: str, error: str
) -> None:
    runtime = make_runtime()
    runtime.start()
    run_id = run(runtime, {"id": "bad", "type": "python", "ref": f"{HERE}:{function}"})

    status = runtime.wait_settled(run_id, 10)

    assert status.status == "failed"
    assert error in (status.error or "")


def test_http_step_sends_its_request_and_records_the_response(
    make_runtime: MakeRuntime, server: str
) -> None:
    runtime = make_runtime()
    runtime.start()
    step = {
        "id": "ping",
        "type": "http",
        "url": f"{server}/201",
        "method": "POST",
        "headers": {"X-Token": "t"},
        "body": {"hello": "world"},
        "expect_status": [201],
    }
    run_id = run(runtime, step)

    assert runtime.wait_settled(run_id, 10).status == "completed"
    result = runtime.inspect_run(run_id).result
    assert result["status"] == 201
    assert json.loads(result["body"]) == {"got": {"hello": "world"}, "auth": "t"}


def test_http_step_fails_on_an_unexpected_status(make_runtime: MakeRuntime, server: str) -> None:
    runtime = make_runtime()
    runtime.start()
    step = {"id": "ping", "type": "http", "url": f"{server}/503", "method": "POST"}
    run_id = run(runtime, step)

    status = runtime.wait_settled(run_id, 10)

    assert status.status == "failed"
    assert status.error == "step 'ping' failed after 1 attempt: unexpected HTTP status 503"
