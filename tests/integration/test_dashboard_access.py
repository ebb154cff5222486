"""Who may see and do what on the dashboard, over HTTP on a real store (uvicorn served).

No page without signing in when tokens are configured; actions refused for read-only
tokens, without the CSRF token, with another session's, and from another site; no
token in a page, a log line, a URL or a cookie; the session cookie's flags; a
session ended when its token leaves the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from tests.api_support import DECLARATIONS, READ_TOKEN, WRITE_TOKEN, Api, served_api
from triggers import actions
from triggers.addresses import ListenAddress
from triggers.api import api_config
from triggers.clock import SystemClock
from triggers.declarations import parse_declarations
from triggers.errors import ConfigError
from triggers.settings import Settings
from triggers.store.audit_log import Actor
from triggers.store.sql_audit import SqlAuditLog

PAGES = ["/", "/triggers", "/triggers/nightly", "/audit", "/status"]


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with served_api(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path) as served:
        yield served


def _browser(api: Api) -> httpx.Client:
    return httpx.Client(base_url=api.url.removesuffix("/api/v1"), timeout=30)


def _csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


@contextmanager
def _signed_in(api: Api, token: str) -> Iterator[httpx.Client]:
    with _browser(api) as client:
        form = client.get("/login")
        answer = client.post(
            "/login", data={"csrf": _csrf(form), "token": token, "next": "/triggers/nightly"}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/triggers/nightly"
        yield client


def test_no_page_shows_without_signing_in(api: Api) -> None:
    with _browser(api) as client:
        for path in PAGES:
            answer = client.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["location"] == f"/login?next={path}"
        run = client.get("/runs/some-run")
        assert run.status_code == 303
        form = client.get("/login")
        assert form.status_code == 200 and 'name="token"' in form.text
        wrong = client.post("/login", data={"csrf": _csrf(form), "token": "x" * 40})
        assert wrong.status_code == 401 and "not one of" in wrong.text
        assert client.get("/").status_code == 303
        assert "Traceback" not in wrong.text


def test_the_session_cookie_is_http_only_strict_and_carries_no_token(api: Api) -> None:
    with _browser(api) as client:
        form = client.get("/login")
        answer = client.post("/login", data={"csrf": _csrf(form), "token": WRITE_TOKEN})
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        assert "Secure" not in cookie  # plain HTTP here: a Secure cookie would never return
        assert WRITE_TOKEN not in cookie
        before = form.headers["set-cookie"].split(";")[0]
        assert before != cookie.split(";")[0]  # a new session id once signed in
        for header in ("content-security-policy", "x-frame-options", "referrer-policy"):
            assert header in answer.headers or header in client.get("/").headers


def test_a_read_only_token_sees_no_action_and_is_refused_every_one(api: Api) -> None:
    with _signed_in(api, READ_TOKEN) as client:
        page = client.get("/triggers/nightly")
        assert page.status_code == 200
        assert 'id="pause"' not in page.text and 'id="fire"' not in page.text
        csrf = _csrf(page)
        for path, fields in [
            ("/triggers/nightly/pause", {}),
            ("/triggers/nightly/resume", {}),
            ("/triggers/nightly/fire", {}),
            ("/runs/r1/cancel", {}),
            ("/runs/r1/retry", {"effect_id": "gate"}),
            ("/runs/r1/signal", {"name": "go"}),
        ]:
            for confirm in ("", "yes"):
                answer = client.post(path, data={"csrf": csrf, "confirm": confirm, **fields})
                assert answer.status_code == 403, (path, answer.text)
                assert "may only read" in answer.text
    assert api.get("/triggers/nightly")["paused"] is False
    assert [e["action"] for e in api.get("/audit-log")] == ["apply"]


def test_an_action_needs_this_sessions_csrf_token_and_this_site(api: Api) -> None:
    with _signed_in(api, WRITE_TOKEN) as client, _signed_in(api, WRITE_TOKEN) as other:
        mine, theirs = _csrf(client.get("/triggers/nightly")), _csrf(other.get("/"))
        assert mine != theirs
        refused = [
            client.post("/triggers/nightly/pause", data={"confirm": "yes"}),
            client.post("/triggers/nightly/pause", data={"confirm": "yes", "csrf": ""}),
            client.post("/triggers/nightly/pause", data={"confirm": "yes", "csrf": theirs}),
            client.post(
                "/triggers/nightly/pause",
                data={"confirm": "yes", "csrf": mine},
                headers={"Origin": "http://evil.example"},
            ),
            client.post("/triggers/nightly/pause", json={"confirm": "yes", "csrf": mine}),
        ]
        assert [r.status_code for r in refused] == [403, 403, 403, 403, 400]
        assert api.get("/triggers/nightly")["paused"] is False
        asked = client.post("/triggers/nightly/pause", data={"csrf": mine, "note": "why"})
        assert asked.status_code == 200 and 'name="confirm" value="yes"' in asked.text
        assert api.get("/triggers/nightly")["paused"] is False  # asked, not yet done
        done = client.post(
            "/triggers/nightly/pause", data={"csrf": mine, "confirm": "yes", "note": "why"}
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/triggers/nightly?done=paused"
    [entry, *_] = api.get("/audit-log")
    assert (entry["action"], entry["user"], entry["note"]) == ("pause", "api:ci", "why")


def test_no_token_in_pages_logs_or_urls(api: Api) -> None:
    with capture_logs() as logs:
        with _signed_in(api, WRITE_TOKEN) as client:
            seen = [client.get(path) for path in PAGES]
            csrf = _csrf(seen[0])
            client.post("/triggers/nightly/pause", data={"csrf": csrf, "confirm": "yes"})
            client.post("/logout", data={"csrf": csrf})
            assert client.get("/").status_code == 303  # signed out
        with _browser(api) as stranger:
            stranger.post("/login", data={"csrf": "forged", "token": READ_TOKEN})
    text = " ".join([*(r.text for r in seen), *(str(r.url) for r in seen), repr(logs)])
    assert READ_TOKEN not in text and WRITE_TOKEN not in text
    assert {"dashboard_signed_in", "dashboard_request_refused"} <= {e["event"] for e in logs}


def test_a_session_ends_when_its_token_leaves_the_file(api: Api, tmp_path: Path) -> None:
    with _signed_in(api, WRITE_TOKEN) as client:
        assert client.get("/").status_code == 200
        (tmp_path / "api-write-token").write_text(f"ci {'n' * 40}\n")
        assert api.tokens is not None
        api.tokens.reload()  # what SIGHUP does
        assert client.get("/").status_code == 303


def test_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="beyond loopback"):
        api_config(Settings(api_address="0.0.0.0:8080", state_directory=tmp_path))
    assert ListenAddress("127.0.0.1", 8080).loopback


def test_without_tokens_a_local_browser_acts_without_signing_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'triggers.sqlite'}"
    with served_api(url, tmp_path, tokens=False) as api, _browser(api) as client:
        page = client.get("/triggers/nightly")
        assert page.status_code == 200 and 'id="pause"' in page.text
        refused = client.post("/triggers/nightly/pause", data={"confirm": "yes"})
        assert refused.status_code == 403  # the CSRF token is still needed
        done = client.post("/triggers/nightly/pause", data={"csrf": _csrf(page), "confirm": "yes"})
        assert done.status_code == 303
        assert api.get("/triggers/nightly")["paused"] is True


def test_a_refresh_of_an_unchanged_page_is_answered_304_until_it_changes(api: Api) -> None:
    with _signed_in(api, READ_TOKEN) as client:
        for path in PAGES:
            first = client.get(path)
            tag = first.headers["etag"]
            again = client.get(path, headers={"If-None-Match": tag})
            assert (again.status_code, again.text) == (304, ""), path
            assert again.headers["etag"] == tag and again.headers["cache-control"] == "no-store"
        trigger = client.get("/triggers/nightly").headers["etag"]
        api.post("/triggers/nightly/pause", {"note": "maintenance"})
        changed = client.get("/triggers/nightly", headers={"If-None-Match": trigger})
        assert changed.status_code == 200 and "maintenance" in changed.text
        assert changed.headers["etag"] != trigger


def test_a_retired_trigger_page_says_which_apply_retired_it(api: Api) -> None:
    text = DECLARATIONS.replace("  - {id: gated, flow: gated, every: 1d}\n", "")
    actions.apply(
        api.backend.store,
        SqlAuditLog(api.backend.db),
        api.backend.runtime.register_flow,
        parse_declarations(text, source="triggers.yaml"),
        now=SystemClock().now(),
        actor=Actor(host="ops-host", user="ops"),
        note="gated is gone",
    )
    with _signed_in(api, READ_TOKEN) as client:
        page = client.get("/triggers/gated")
        declared = client.get("/triggers/nightly")
    assert page.status_code == 200
    note = re.search(r'id="retired-note">(.*?)</p>', page.text, flags=re.DOTALL)
    assert note, page.text
    assert "by apply (revision 1, by ops@ops-host: “gated is gone”)" in note.group(1)
    assert 'id="retired-note"' not in declared.text


def test_the_overview_shows_alerts_that_did_not_reach_their_channel(api: Api) -> None:
    from triggers.alert_rules import AlertChannel, AlertEvent, AlertFacts, AlertRule
    from triggers.store import _alerts
    from triggers.store.sql_alerts import SqlAlertOutbox

    now = SystemClock().now()
    hook = AlertChannel(name="hook", kind="webhook", config={"url": "http://127.0.0.1:9/x"})
    rule = AlertRule(to=(hook,))
    raised = [
        (AlertFacts(event=AlertEvent.FAILED, trigger_id=tid, occurrence_at=now, at=now), rule)
        for tid in ("nightly", "hourly", "untried")
    ]
    with api.backend.db.write() as conn:
        _alerts.raise_alerts(conn, raised, now)
    outbox = SqlAlertOutbox(api.backend.db)
    by_trigger = {
        r.trigger_id: r for r in outbox.claim(owner="t", now=now, lease=timedelta(minutes=1))
    }
    outbox.record(by_trigger["nightly"], owner="t", now=now, delivered=False, error="HTTP 500 down")
    outbox.record(
        by_trigger["hourly"], owner="t", now=now, delivered=False, error="refused", retry_at=now
    )  # still retried; "untried" not tried yet: nothing wrong with it

    with _signed_in(api, READ_TOKEN) as client:
        page = client.get("/").text

    assert 'id="alerts"' in page
    section = page.split('id="alerts"')[1].split("</ul>")[0]
    assert "nightly failed" in section and "HTTP 500 down" in section
    assert "hourly failed" in section and "refused" in section
    assert "untried" not in section
    assert 'id="calm"' not in page
