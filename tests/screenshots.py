"""Regenerate the dashboard's screenshots in docs/ (`make screenshots`).

Starts the real daemon on a fresh SQLite file with a small example (a nightly job,
a failing one, a release waiting for approval, a paused one), lets it run, signs in
with a write token in headless chromium and saves every page in the light and the
dark scheme: `python -m tests.screenshots [DIRECTORY]` (default docs/dashboard).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from tests.browser import browser, missing, screenshot
from tests.e2e.conftest import Cli, stop, wait_for
from tests.e2e.test_api import free_address

TOKEN = "docs-" + "d" * 35
EXAMPLE = textwrap.dedent(
    """\
    version: 1
    flows:
      backup: {steps: [{id: dump, run: [sh, -c, "echo dumped 2.1 GB"]}]}
      report:
        steps:
          - {id: fetch, run: [sh, -c, "echo fetched 120 rows"]}
          - {id: render, run: [sh, -c, "echo 'render: template report.html not found' >&2; exit 2"]}
      release:
        steps:
          - {id: build, run: [sh, -c, "echo built v1.4.2"]}
          - {id: approve, wait_signal: {name: approved}}
          - {id: deploy, run: [sh, -c, "echo deployed"]}
    triggers:
      - {id: nightly-backup, flow: backup, cron: "30 2 * * *", timezone: Europe/Berlin,
         description: Nightly database backup}
      - {id: heartbeat, flow: backup, every: 20s, description: Liveness ping}
      - {id: weekly-report, flow: report, cron: "0 6 * * 1", timezone: America/New_York,
         description: Weekly sales report}
      - {id: release, flow: release, cron: "0 3 * * *", description: Nightly release}
      - {id: month-end, flow: backup, calendar: {months: 1, day: 1, hour: 6}}
    """
)


def main(directory: Path) -> int:
    why = missing()
    if why is not None:
        sys.stderr.write(f"cannot draw the screenshots: {why}\n")
        return 1
    work = Path(tempfile.mkdtemp(prefix="triggers-screenshots-"))
    cli = Cli(f"sqlite:///{work / 'triggers.sqlite'}", work)
    (work / "triggers.yaml").write_text(EXAMPLE)
    (work / "tokens").write_text(f"ops {TOKEN}\n")
    address = free_address()
    cli.env.update(
        {"TRIGGERS_API_ADDRESS": address, "TRIGGERS_API_TOKEN_FILE": str(work / "tokens")}
    )
    daemon = cli.daemon(work / "triggers.yaml", work / "daemon.log")
    url = f"http://{address}"
    try:
        wait_for(lambda: _answers(url), timeout=90, what="the dashboard")
        for trigger_id in ("weekly-report", "release", "nightly-backup"):
            cli.run("fire", trigger_id)
        cli.run("pause", "month-end", "--note", "waiting for the new ledger schema")
        time.sleep(45)  # a few heartbeats, and the release waiting for its approval
        release = cli.json("history", "release")[0]["run_id"]
        failed = cli.json("history", "weekly-report")[0]["run_id"]
        pages = {
            "overview": "/",
            "triggers": "/triggers",
            "trigger": "/triggers/heartbeat?span=6h",
            "run": f"/runs/{failed}",
            "run-waiting": f"/runs/{release}",
            "audit": "/audit",
            "status": "/status",
        }
        for scheme in ("light", "dark"):
            with browser(dark=scheme == "dark") as driver:
                driver.get(f"{url}/login")
                if scheme == "light":
                    screenshot(driver, directory / "login.png")
                driver.find_element("id", "token").send_keys(TOKEN)
                driver.find_element("id", "sign-in").click()
                for name, path in pages.items():
                    driver.get(f"{url}{path}")
                    shot = screenshot(driver, directory / f"{name}-{scheme}.png")
                    sys.stdout.write(f"{shot}\n")
    finally:
        stop(daemon)
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/login", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard")))
