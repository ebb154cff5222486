"""The dashboard in a real browser (headless chromium) against the real daemon.

An operator signs in with a read-only token and with a write token, finds a failing
trigger from the overview and reads its step's stderr, resumes a run waiting for a
signal, pauses and resumes a trigger with a note and finds both in the audit log,
follows a timeline bar to its run, and watches a page change without reloading it.
Every page is saved as a screenshot (light and dark) under the test's directory,
or under `DASHBOARD_SCREENSHOTS` when it is set.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import browser, eventually, require_browser, screenshot
from tests.e2e.conftest import Cli, stop, wait_for
from tests.e2e.test_api import free_address

# One worker runs the module (`--dist loadgroup`): its module-scoped daemon and
# ledger are built once, not once on each worker that gets one of its tests.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300), pytest.mark.xdist_group("dashboard")]

READ_TOKEN = "look-" + "r" * 35
WRITE_TOKEN = "act-" + "w" * 36
CONFIG = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
      broken:
        steps:
          - {id: boom, run: [sh, -c, "echo working; echo 'disk full: /var/backups' >&2; exit 3"]}
      gated:
        steps:
          - {id: gate, wait_signal: {name: approve}}
          - {id: after, run: [sh, -c, "echo resumed"]}
    triggers:
      - id: nightly
        flow: noop
        cron: "30 2 * * *"
        timezone: Europe/Berlin
        description: Nightly database backup
      - {id: broken, flow: broken, every: 1d, description: Disk report}
      - {id: gated, flow: gated, every: 1d, description: Release waiting for approval}
      - {id: gated-live, flow: gated, every: 1d}
    """
)


class Dashboard:
    """The daemon serving the dashboard, its CLI, and where screenshots go."""

    def __init__(self, cli: Cli, url: str, shots: Path, log: Path) -> None:
        self.cli, self.url, self.shots, self.log = cli, url, shots, log

    def run_of(self, trigger_id: str) -> str:
        rows = self.cli.json("history", trigger_id)
        return str(rows[0]["run_id"]) if rows and rows[0]["run_id"] else ""

    def waiting(self, run_id: str) -> bool:
        events = self.cli.json("runs", "events", run_id)
        return "wait_started" in [event["type"] for event in events]


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    require_browser()
    tmp_path = tmp_path_factory.mktemp("dashboard")
    cli = Cli(f"sqlite:///{tmp_path / 'triggers.sqlite'}", tmp_path)
    config = tmp_path / "triggers.yaml"
    config.write_text(CONFIG)
    read, write = tmp_path / "read-tokens", tmp_path / "write-tokens"
    read.write_text(f"viewer {READ_TOKEN}\n")
    write.write_text(f"ci {WRITE_TOKEN}\n")
    address = free_address()
    cli.env.update(
        {
            "TRIGGERS_API_ADDRESS": address,
            "TRIGGERS_API_TOKEN_FILE": str(read),
            "TRIGGERS_API_WRITE_TOKEN_FILE": str(write),
        }
    )
    log = tmp_path / "daemon.log"
    daemon = cli.daemon(config, log)
    url = f"http://{address}"
    try:
        wait_for(lambda: _answers(f"{url}/login"), timeout=90, what="the dashboard to answer")
        for trigger_id in ("broken", "gated", "gated-live"):
            cli.run("fire", trigger_id)
        shown = Dashboard(cli, url, Path(os.environ.get("DASHBOARD_SCREENSHOTS", tmp_path)), log)
        wait_for(
            lambda: cli.json("history", "broken")[0]["outcome"] == "failed",
            timeout=60,
            what="the broken trigger's run to fail",
        )
        for trigger_id in ("gated", "gated-live"):
            _wait_for_the_signal_wait(shown, trigger_id)
        yield shown
    finally:
        assert stop(daemon) == 0
    text = log.read_text()
    assert READ_TOKEN not in text and WRITE_TOKEN not in text


def _wait_for_the_signal_wait(shown: Dashboard, trigger_id: str) -> None:
    run_id = wait_for(lambda: shown.run_of(trigger_id), timeout=60, what="a launch")
    wait_for(lambda: shown.waiting(run_id), timeout=60, what="the wait")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _by_id(driver: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id)


def _has(driver: Any, element_id: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(driver.find_elements(By.ID, element_id))


def _sign_in(driver: Any, dashboard: Dashboard, token: str, *, shot: str | None = None) -> None:
    driver.get(f"{dashboard.url}/")
    assert driver.current_url.startswith(f"{dashboard.url}/login"), driver.current_url
    if shot:
        screenshot(driver, dashboard.shots / shot)
    _by_id(driver, "token").send_keys(token)
    _by_id(driver, "sign-in").click()
    eventually(lambda: _has(driver, "overview"), timeout=30, what="the overview")
    assert token not in driver.current_url and token not in driver.page_source


def _confirm(driver: Any, note: str) -> None:
    eventually(lambda: _has(driver, "confirm"), timeout=30, what="the confirmation page")
    _by_id(driver, "note").send_keys(note)
    _by_id(driver, "confirm").click()
    eventually(lambda: _has(driver, "notice"), timeout=30, what="the action's notice")


def test_a_read_only_token_finds_the_failing_trigger_and_reads_its_stderr(
    dashboard: Dashboard,
) -> None:
    from selenium.webdriver.common.by import By

    with browser() as driver:
        driver.get(f"{dashboard.url}/login")
        _by_id(driver, "token").send_keys("not-a-token-of-this-daemon")
        _by_id(driver, "sign-in").click()
        problem = eventually(lambda: _by_id(driver, "problem").text, timeout=30, what="the refusal")
        assert "not one of" in problem
        _sign_in(driver, dashboard, READ_TOKEN, shot="login.png")
        assert "viewer (read only)" in _by_id(driver, "who").text
        screenshot(driver, dashboard.shots / "overview.png")
        failing = _by_id(driver, "failing")
        assert "broken" in failing.text and "disk full" in failing.text
        failing.find_element(By.CLASS_NAME, "run-link").click()
        run_id = dashboard.run_of("broken")
        eventually(lambda: run_id in driver.current_url, timeout=30, what="the run's page")
        stderr = eventually(
            lambda: _by_id(driver, "stderr-boom-1").text, timeout=30, what="the step's stderr"
        )
        assert stderr == "disk full: /var/backups"
        assert "failed" in _by_id(driver, "run-state").text
        screenshot(driver, dashboard.shots / "run.png")

        driver.get(f"{dashboard.url}/triggers/nightly")
        assert "At 02:30, every day, Berlin time" in driver.page_source
        assert not _has(driver, "pause") and not _has(driver, "fire")
        gated = dashboard.run_of("gated")
        driver.get(f"{dashboard.url}/runs/{gated}")
        assert "approve" in _by_id(driver, "waiting").text
        assert not _has(driver, "signal-approve") and not _has(driver, "cancel")
        # The list says what the trigger's active run waits for, as `list` does.
        driver.get(f"{dashboard.url}/triggers?q=gated")
        row = _by_id(driver, "trigger-gated").text
        assert "waiting" in row and "for approve" in row, row


def test_a_write_token_resumes_a_run_waiting_for_a_signal(dashboard: Dashboard) -> None:
    run_id = dashboard.run_of("gated")
    with browser() as driver:
        _sign_in(driver, dashboard, WRITE_TOKEN)
        assert "ci (may act)" in _by_id(driver, "who").text
        driver.get(f"{dashboard.url}/runs/{run_id}")
        screenshot(driver, dashboard.shots / "run-waiting.png")
        _by_id(driver, "payload-1").send_keys('{"approved_by": "alice"}')
        _by_id(driver, "signal-approve").click()
        eventually(lambda: _has(driver, "confirm"), timeout=30, what="the confirmation")
        screenshot(driver, dashboard.shots / "confirm.png")
        _confirm(driver, "release approved")

        def finished() -> bool:
            driver.refresh()
            return "completed" in _by_id(driver, "run-state").text

        eventually(finished, timeout=60, what="the run to complete")
        assert _by_id(driver, "stdout-after-1").text == "resumed"
    [entry] = dashboard.cli.json("audit-log", "--run", run_id)
    assert (entry["action"], entry["user"], entry["note"]) == (
        "signal",
        "api:ci",
        "release approved",
    )


def test_a_page_shows_what_changed_without_a_reload(dashboard: Dashboard) -> None:
    run_id = dashboard.run_of("gated-live")
    with browser() as driver:
        _sign_in(driver, dashboard, READ_TOKEN)
        driver.get(f"{dashboard.url}/runs/{run_id}")
        assert "active" in _by_id(driver, "run-state").text
        driver.execute_script("window.notReloaded = true;")
        dashboard.cli.run("runs", "signal", run_id, "approve")
        eventually(
            lambda: "completed" in _by_id(driver, "run-state").text,
            timeout=60,
            what="the run's page to show it completed",
        )
        assert driver.execute_script("return window.notReloaded === true;")
        assert "live: refreshed" in _by_id(driver, "live").text


def test_pause_and_resume_with_a_note_show_in_the_audit_log(dashboard: Dashboard) -> None:
    with browser() as driver:
        _sign_in(driver, dashboard, WRITE_TOKEN)
        driver.get(f"{dashboard.url}/triggers/nightly")
        _by_id(driver, "pause").click()
        _confirm(driver, "database maintenance until 06:00")
        note = eventually(lambda: _by_id(driver, "paused-note").text, timeout=30, what="the note")
        assert "database maintenance until 06:00" in note
        screenshot(driver, dashboard.shots / "trigger-paused.png")
        _by_id(driver, "resume").click()
        _confirm(driver, "maintenance done")
        eventually(lambda: _has(driver, "pause"), timeout=30, what="the resumed trigger's page")
        assert not _has(driver, "paused-note")
        driver.get(f"{dashboard.url}/audit?trigger=nightly")
        rows = _by_id(driver, "audit-rows").text
        assert "pause" in rows and "database maintenance until 06:00" in rows
        assert "resume" in rows and "maintenance done" in rows
        assert rows.count("api:ci") == 2
        screenshot(driver, dashboard.shots / "audit.png")
    actions = dashboard.cli.json("audit-log", "--trigger", "nightly")
    assert [(a["action"], a["user"], a["note"]) for a in actions[:2]] == [
        ("resume", "api:ci", "maintenance done"),
        ("pause", "api:ci", "database maintenance until 06:00"),
    ]
    assert dashboard.cli.json("describe", "nightly")["paused"] is False


def test_a_timeline_bar_leads_to_its_run(dashboard: Dashboard) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    run_id = dashboard.run_of("broken")
    with browser() as driver:
        _sign_in(driver, dashboard, READ_TOKEN)
        driver.get(f"{dashboard.url}/triggers/broken")
        screenshot(driver, dashboard.shots / "trigger.png")
        [bar] = driver.find_elements(By.CSS_SELECTOR, "#timeline svg a")
        assert bar.get_dom_attribute("href") == f"/runs/{run_id}"
        tip = bar.find_element(By.TAG_NAME, "title").get_attribute("textContent")
        assert tip.startswith(f"run {run_id} (manual) · failed · ")
        ActionChains(driver).move_to_element(bar).click().perform()
        eventually(lambda: run_id in driver.current_url, timeout=30, what="the run's page")
        eventually(lambda: _has(driver, "stderr-boom-1"), timeout=30, what="the run's stderr")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_is_drawn_in_both_schemes(dashboard: Dashboard, scheme: str) -> None:
    from selenium.webdriver.common.by import By

    pages = {
        "overview": "/",
        "triggers": "/triggers",
        "trigger": "/triggers/broken",
        "run": f"/runs/{dashboard.run_of('broken')}",
        "audit": "/audit",
        "status": "/status",
    }
    with browser(dark=scheme == "dark") as driver:
        _sign_in(driver, dashboard, WRITE_TOKEN)
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == ("rgb(15, 18, 22)" if scheme == "dark" else "rgb(246, 247, 249)")
        for name, path in pages.items():
            driver.get(f"{dashboard.url}{path}")
            assert "That did not work" not in driver.page_source, path
            shot = screenshot(driver, dashboard.shots / f"{name}-{scheme}.png")
            assert shot.stat().st_size > 10_000
        driver.get(f"{dashboard.url}/triggers?q=gat")
        listed = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#triggers .trigger-link")]
        assert listed == ["gated", "gated-live"]


def test_the_keyboard_reaches_every_link_and_button(dashboard: Dashboard) -> None:
    from selenium.webdriver.common.keys import Keys

    with browser() as driver:
        _sign_in(driver, dashboard, WRITE_TOKEN)
        driver.get(f"{dashboard.url}/triggers/nightly")
        body = driver.find_element("tag name", "body")
        body.send_keys(Keys.TAB)
        assert driver.switch_to.active_element.text == "Skip to the content"
        reached = set()
        for _ in range(60):
            driver.switch_to.active_element.send_keys(Keys.TAB)
            reached.add(driver.switch_to.active_element.get_attribute("id") or "")
        assert {"fire", "pause"} <= reached
