"""A real browser for the dashboard's tests: Debian's chromium and chromedriver, driven
by Selenium, headless, offline, with a fresh profile each time.

Missing (outside CI) it skips with the reason; under CI (`CI=true`) it fails, since
`.ci/run` installs both packages.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
T = TypeVar("T")


def missing() -> str | None:
    """Why no browser can run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return f"{path} is missing (Debian package {package}; .ci/run installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def require_browser() -> None:
    """Skip the test (fail it under CI) when no browser can run."""
    why = missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"no browser under CI: {why}")
    pytest.skip(why)


@contextmanager
def browser(*, dark: bool = False, width: int = 1360, height: int = 900) -> Iterator[Any]:
    """A headless chromium in a fresh profile, closed (and its profile removed) after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="triggers-chromium-")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    if dark:
        options.add_argument("--force-dark-mode")
        options.add_argument("--blink-settings=preferredColorScheme=0")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, path: Path, *, width: int = 1360) -> Path:
    """The whole page as a PNG (the window grown to the page's height, 4000 px at most)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, min(max(height, 600), 4000))
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path


def eventually(check: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Poll `check` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Exception:  # noqa: BLE001 (an element not there yet: look again)
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)
