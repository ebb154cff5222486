"""The HTTP API on a real store (SQLite and PostgreSQL), served by uvicorn: the CLI's
documents, errors and audit trail, and the token rules."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from looms_runtime.records import StartRequest
from tests.api_support import DECLARATIONS, READ_TOKEN, Api, served_api
from triggers import actions, services
from triggers.clock import SystemClock
from triggers.declarations import parse_declarations
from triggers.documents import describe_json, fire_json, triggers_json
from triggers.errors import StoreUnavailableError
from triggers.inspection import describe_trigger
from triggers.store.audit_log import Actor
from triggers.store.protocol import HistoryQuery
from triggers.store.sql_audit import SqlAuditLog


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with served_api(database_url, tmp_path) as served:
        yield served


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert "Traceback" not in response.text
    return error


def _start_gated(api: Api, key: str = "gated:by-test") -> str:
    flow = api.declarations.flows["gated"]
    handle = api.backend.runtime.start_run(
        StartRequest(
            flow="gated",
            version=flow.version,
            idempotency_key=key,
            attributes={"trigger_id": "gated"},
        )
    )
    return handle.run_id


def _wait_for(check: Any, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_queries_answer_the_documents_of_the_cli(api: Api) -> None:
    store, audit = api.backend.store, SqlAuditLog(api.backend.db)
    now = SystemClock().now()

    listed = api.get("/triggers")
    assert listed == triggers_json(services.list_triggers(store, now=now), {})
    assert [row["id"] for row in listed] == ["gated", "nightly"]
    described = api.get("/triggers/nightly", fires=1, next=2)
    expected = describe_json(
        describe_trigger(store, audit, "nightly", now=now, fires=1, upcoming=2)
    )
    assert described == expected
    assert described["declaration"]["schedule"] == "cron 30 2 * * *"
    upcoming = api.get("/triggers/nightly/next", count=2, after="2026-03-28T12:00:00Z")
    assert [{"occurrence": u["occurrence"], "local": u["local"]} for u in upcoming] == [
        {"occurrence": "2026-03-29T01:00:00.000Z", "local": "2026-03-29T03:00:00+02:00"},
        {"occurrence": "2026-03-30T00:30:00.000Z", "local": "2026-03-30T02:30:00+02:00"},
    ]
    assert [u["dst"] is not None for u in upcoming] == [True, False]  # 02:30 did not exist
    far = api.reader.get("/triggers/nightly/next", params={"after": "9999-12-31T23:59:59Z"})
    assert far.status_code == 400, far.text  # it was a 500 (OverflowError)
    assert "out of range" in far.json()["error"]["message"]

    api.post("/triggers/nightly/fire", {"key": "one"})
    rows = [
        fire_json(r) | {"retirement": None, "revival": None}
        for r in store.history(HistoryQuery(limit=10))
    ]
    assert api.get("/history") == rows
    assert api.get("/triggers/nightly/history", outcome="launching", since="1h ago") == rows
    assert api.get("/history", outcome="failed") == []
    assert api.get("/history", until="yesterday") == []
    assert api.get("/triggers/gated/history") == []


def test_history_and_describe_of_a_retired_trigger_name_the_apply_that_retired_it(
    api: Api,
) -> None:
    api.post("/triggers/gated/fire", {"key": "before"})
    without_gated = parse_declarations(
        DECLARATIONS.replace("  - {id: gated, flow: gated, every: 1d}\n", ""),
        source="triggers.yaml",
    )
    assert [t.id for t in without_gated.triggers] == ["nightly"]
    actions.apply(
        api.backend.store,
        SqlAuditLog(api.backend.db),
        api.backend.runtime.register_flow,
        without_gated,
        now=SystemClock().now(),
        actor=Actor(host="ops-host", user="ops"),
        note="gated is gone",
    )

    [row] = api.get("/triggers/gated/history")
    retirement = row["retirement"]
    assert (retirement["event"], retirement["revision"]) == ("retired", 1)
    assert (retirement["user"], retirement["host"], retirement["note"]) == (
        "ops",
        "ops-host",
        "gated is gone",
    )
    assert retirement["at"] > row["occurrence"]
    assert api.get("/history") == [row]
    described = api.get("/triggers/gated")
    assert described["retirement"] == retirement
    assert [e["event"] for e in described["lifecycle"]] == ["retired", "created"]
    assert described["lifecycle"][1]["user"] == "tester"


def test_a_fire_retried_with_its_key_claims_once_and_records_the_caller(api: Api) -> None:
    first = api.post("/triggers/nightly/fire", {"key": "deploy-1", "note": "after the deploy"})
    again = api.post("/triggers/nightly/fire", {"key": "deploy-1"})

    assert (first["action"], first["pending_launch"]) == ("fire", True)
    assert first["idempotency_key"] == "nightly:manual:deploy-1"
    assert (again["action"], again["pending_launch"]) == ("duplicate", False)
    [row] = api.get("/history")
    assert (row["manual_key"], row["host"]) == ("deploy-1", "test-host")
    fires = api.get("/audit-log", action="fire")
    assert [(e["user"], e["host"], e["note"]) for e in fires] == [
        ("api:ci", "127.0.0.1", None),
        ("api:ci", "127.0.0.1", "after the deploy"),
    ]
    assert fires[1]["changes"]["action"] == "fire"
    # No body: keyed by the time, and the first fire still holds the trigger (overlap: skip).
    later = api.post("/triggers/nightly/fire")
    assert (later["action"], later["reason"]) == ("skip", "overlap")


def test_pause_and_resume_are_recorded_with_the_caller(api: Api) -> None:
    paused = api.post("/triggers/nightly/pause", {"note": "db maintenance"})
    assert paused == {"id": "nightly", "paused": True, "pause_note": "db maintenance"}
    described = api.get("/triggers/nightly")
    assert described["state"] == "paused"
    assert described["paused_by"]["user"] == "api:ci"
    assert api.post("/triggers/nightly/resume") == {
        "id": "nightly",
        "paused": False,
        "pause_note": None,
    }
    log = api.get("/audit-log", trigger="nightly")
    assert [(e["action"], e["user"]) for e in log[:2]] == [
        ("resume", "api:ci"),
        ("pause", "api:ci"),
    ]
    assert log[0]["changes"]["pause_note"] == "db maintenance"


def test_a_signal_over_http_resumes_a_waiting_run(api: Api) -> None:
    run_id = _start_gated(api)
    _wait_for(
        lambda: "wait_started" in [e["type"] for e in api.get(f"/runs/{run_id}/events")],
        "the run to wait for its signal",
    )
    assert api.get(f"/runs/{run_id}")["status"] == "active"
    # No step waits for it, now or later: refused, naming what the run waits for.
    misspelt = _error(api.writer.post(f"/runs/{run_id}/signal", json={"name": "later"}), 409)
    assert misspelt["code"] == "TRG-120" and misspelt["details"]["awaited"] == ["go"]
    assert f"waiting for signal 'go': triggers runs signal {run_id} go" in misspelt["message"]

    sent = api.post(f"/runs/{run_id}/signal", {"name": "go", "payload": {"ok": True}, "key": "k1"})
    assert sent["run_id"] == run_id

    settled = api.backend.runtime.wait_settled(run_id, timeout=20)
    assert settled.status == "completed"
    shown = api.get(f"/runs/{run_id}")
    assert (shown["status"], shown["attributes"]) == ("completed", {"trigger_id": "gated"})
    [attempt] = api.get(f"/runs/{run_id}/logs", step="after")
    assert (attempt["outcome"], attempt["stdout"]) == ("succeeded", "resumed\n")
    again = api.post(f"/runs/{run_id}/signal", {"name": "go", "payload": {"ok": True}, "key": "k1"})
    assert again["status"] == "completed"  # a repeat of a signal it took answers as the first
    late = _error(api.writer.post(f"/runs/{run_id}/signal", json={"name": "go"}), 409)
    assert late["message"] == f"run {run_id} is completed: it waits for no signal any more"
    entry = api.get("/audit-log", run=run_id)[-2]
    assert (entry["action"], entry["trigger_id"], entry["user"]) == ("signal", "gated", "api:ci")
    assert "ok" not in json.dumps(entry)  # a payload is the caller's data, never kept
    assert [r["run_id"] for r in api.get("/runs", status="completed")] == [run_id]
    events = api.get(f"/runs/{run_id}/events", **{"from": 2, "limit": 1})
    assert [e["seq"] for e in events] == [2]


def test_cancel_and_retry_answer_as_the_cli(api: Api) -> None:
    run_id = _start_gated(api, key="gated:to-cancel")
    _wait_for(
        lambda: "wait_started" in [e["type"] for e in api.get(f"/runs/{run_id}/events")],
        "the run to wait",
    )
    refused = api.writer.post(f"/runs/{run_id}/retry", json={"effect_id": "gate"})
    error = _error(refused, 409)
    assert error["code"] == "TRG-119"
    assert "is not ambiguous or timed out" in error["message"]

    status = api.post(f"/runs/{run_id}/cancel", {"reason": "not today"})
    assert status["run_id"] == run_id
    assert api.backend.runtime.wait_settled(run_id, timeout=20).status == "cancelled"
    [entry] = api.get("/audit-log", run=run_id, action="cancel")
    assert (entry["note"], entry["user"]) == ("not today", "api:ci")


def test_bad_input_answers_the_cli_codes_and_messages(api: Api) -> None:
    cases: list[tuple[str, str, Any, int, str, str | None]] = [
        (
            "GET",
            "/triggers/ghost",
            None,
            404,
            "TRG-112",
            "no trigger 'ghost'; known: gated, nightly",
        ),
        ("GET", "/triggers/ghost/history", None, 404, "TRG-112", None),
        ("GET", "/history?since=yesterday-ish", None, 400, "TRG-113", None),
        ("GET", "/history?outcome=nope", None, 400, "TRG-110", "unknown outcome 'nope'; ..."),
        ("GET", "/history?limit=0", None, 400, "TRG-116", None),
        ("GET", "/triggers/nightly/next?count=abc", None, 400, "TRG-116", None),
        ("GET", "/audit-log?action=explode", None, 400, "TRG-110", None),
        ("GET", "/runs/ghost", None, 404, "TRG-115", "no run 'ghost'"),
        ("GET", "/runs?status=asleep", None, 400, "TRG-118", None),
        ("POST", "/triggers/nightly/fire", {"overlap": "never"}, 400, "TRG-110", None),
        ("POST", "/triggers/nightly/fire", {"kee": "x"}, 400, "TRG-116", None),
        ("POST", "/runs/ghost/signal", {"name": "go"}, 404, "TRG-115", None),
        ("POST", "/runs/ghost/signal", {}, 400, "TRG-116", None),
        (
            "GET",
            "/history?outcomes=failed",
            None,
            400,
            "TRG-116",
            "unknown query parameter 'outcomes'; known: limit, outcome, since, until",
        ),
        (
            "GET",
            "/audit-log?run=a%00b",
            None,
            400,
            "TRG-116",
            "query parameter 'run' holds a NUL character (0x00)",
        ),
        ("GET", "/runs/a%00b", None, 400, "TRG-116", "the path holds a NUL character (0x00)"),
        ("POST", "/triggers/nightly/fire", {"note": "a\x00b"}, 400, "TRG-116", None),
        ("GET", "/nothing-here", None, 404, "TRG-116", None),
        ("DELETE", "/triggers", None, 405, "TRG-116", None),
        ("GET", "/history?since=", None, 400, "TRG-116", "query parameter 'since' is empty"),
        ("GET", "/runs/r/logs?step=", None, 400, "TRG-116", "query parameter 'step' is empty"),
    ]
    for method, path, body, status, code, message in cases:
        response = api.writer.request(method, path, json=body)
        error = _error(response, status)
        assert error["code"] == code, (path, error)
        if message is not None:
            prefix = message.removesuffix("...")
            assert error["message"].startswith(prefix), (path, error)
    broken = api.writer.post(
        "/triggers/nightly/fire", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert _error(broken, 400)["code"] == "TRG-116"
    huge = api.writer.post("/triggers/nightly/fire", content=b"x" * (2 * 1024 * 1024))
    assert _error(huge, 413)["code"] == "TRG-116"
    # Chunked, without a length: refused once past the limit, 413 too (it was a 400).
    chunks = (b"x" * 65536 for _ in range(800))  # 50 MiB
    chunked = api.writer.post("/triggers/nightly/fire", content=chunks)
    assert "content-length" not in chunked.request.headers
    assert _error(chunked, 413)["code"] == "TRG-116"
    # The published schema refuses the empty values the server refuses.
    document = api.get("/openapi.json")
    [since] = [p for p in document["paths"]["/api/v1/history"]["get"]["parameters"]
               if p["name"] == "since"]  # fmt: skip
    assert since["schema"]["type"] == "string"
    assert since["schema"]["minLength"] == 1
    wrong_method = api.writer.delete("/triggers")
    assert wrong_method.headers["allow"] == "GET"  # a 405 says what the path takes


def test_an_unknown_token_is_401_and_a_read_token_cannot_write(api: Api) -> None:
    missing = api.anonymous.get("/triggers")
    assert _error(missing, 401)["code"] == "TRG-601"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = api.anonymous.get("/triggers", headers={"Authorization": "Bearer " + "x" * 32})
    assert _error(wrong, 401)["code"] == "TRG-601"
    basic = api.anonymous.get("/triggers", headers={"Authorization": f"Basic {READ_TOKEN}"})
    assert _error(basic, 401)["code"] == "TRG-601"
    assert _error(api.anonymous.get("/openapi.json"), 401)["code"] == "TRG-601"

    with capture_logs() as logs:
        refused = api.reader.post("/triggers/nightly/fire", json={"key": "sneaky"})
    assert _error(refused, 403)["code"] == "TRG-602"
    assert api.get("/history") == []  # nothing was claimed
    assert api.get("/audit-log", action="fire") == []
    assert api.reader.get("/openapi.json").status_code == 200
    assert api.writer.get("/triggers").status_code == 200  # a write token reads too
    [event] = [e for e in logs if e["event"] == "api_request_refused"]
    assert event["reason"] == "read-only token"
    assert READ_TOKEN not in json.dumps(logs, default=str)


def test_without_a_token_file_loopback_callers_act_as_api(
    database_url: str, tmp_path: Path
) -> None:
    with served_api(database_url, tmp_path, tokens=False) as api:
        fired = api.anonymous.post("/triggers/nightly/fire", json={"key": "local"})
        assert fired.status_code == 200, fired.text
        [entry] = api.get("/audit-log", action="fire")
        assert (entry["user"], entry["host"]) == ("api", "127.0.0.1")


def test_a_bug_is_a_500_that_tells_nothing_and_a_down_store_a_503(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the secret detail of a bug")

    monkeypatch.setattr(services, "list_triggers", broken)
    with capture_logs() as logs:
        response = api.reader.get("/triggers")
    error = _error(response, 500)
    assert error["code"] == "TRG-000" and "secret detail" not in response.text
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["api_request_failed"]

    def unavailable(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailableError("the database did not answer")

    monkeypatch.setattr(services, "history", unavailable)
    down = api.reader.get("/history")
    assert _error(down, 503) == {
        "code": "TRG-301",
        "message": "the database did not answer",
        "details": {},
    }
    assert down.headers["retry-after"] == "1"


def test_alerts_are_listed_as_the_cli_lists_them(api: Api) -> None:
    from triggers.alert_rules import AlertChannel, AlertEvent, AlertFacts, AlertRule
    from triggers.store._alerts import raise_alerts

    now = SystemClock().now()
    rule = AlertRule(to=(AlertChannel(name="ops", kind="webhook", config={"url": "http://x"}),))
    facts = AlertFacts(event=AlertEvent.FAILED, trigger_id="nightly", occurrence_at=now, at=now)
    with api.backend.db.write() as conn:
        raise_alerts(conn, [(facts, rule)], now)
    listed = api.get("/alerts")
    assert [(a["id"], a["channel"], a["status"]) for a in listed] == [
        (facts.alert_id, "ops", "pending")
    ]
    assert api.get("/alerts", trigger="gated") == []
    assert api.get("/alerts", status="delivered") == []
    refused = api.reader.get("/alerts", params={"status": "lost"})
    assert refused.status_code == 400, refused.text


def test_the_probes_answer_without_a_token_and_are_in_the_document(api: Api) -> None:
    root = api.url.removesuffix("/api/v1")
    for path in ("/healthz", "/readyz"):
        response = api.anonymous.get(f"{root}{path}")
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "ok"
        assert response.headers["cache-control"] == "no-store"
        assert str(api.backend.db.engine.url.database) not in response.text
        head = api.anonymous.head(f"{root}{path}")
        assert (head.status_code, head.content) == (200, b"")  # for checkers that send HEAD
    ready = api.anonymous.get(f"{root}/readyz").json()
    assert ready["checks"]["store"] == {"ok": True}
    paths = api.get("/openapi.json")["paths"]
    assert {"/healthz", "/readyz"} <= paths.keys()
    assert set(paths["/readyz"]["get"]["responses"]) == {"200", "400", "503"}
    assert set(paths["/readyz"]) == {"get"}


def test_every_integer_parameter_of_the_document_has_both_bounds(api: Api) -> None:
    document = api.get("/openapi.json")
    unbounded, integers = [], 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                schemas = [param.get("schema", {})]
                schemas += schemas[0].get("anyOf", [])
                for schema in schemas:
                    if schema.get("type") == "integer":
                        integers += 1
                        if "minimum" not in schema or "maximum" not in schema:
                            unbounded.append(f"{method.upper()} {path} {param['name']}")
    assert integers > 5
    assert unbounded == []
