"""The dashboard's trigger list over HTTP on a real store: `?q=` and `?state=` pick the
rows the store's query finds, and its pages follow each other by the next-page link."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.api_support import Api, served_api

JOBS = [f"job-{n:02d}" for n in range(57)]
DECLARATIONS = (
    "version: 1\n"
    "flows:\n"
    "  noop: {steps: []}\n"
    "triggers:\n"
    "  - {id: nightly, flow: noop, every: 1d, description: Nightly database backup}\n"
    '  - {id: disk_check, flow: noop, every: 1d, description: "alerts at 100% full"}\n'
    "  - {id: diskxcheck, flow: noop, every: 1d}\n"
    + "".join(f"  - {{id: {job}, flow: noop, every: 1d}}\n" for job in JOBS)
)


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[Api]:
    with served_api(database_url, tmp_path, tokens=False, text=DECLARATIONS) as served:
        yield served


def _rows(client: httpx.Client, **params: str) -> tuple[list[str], str | None]:
    """The ids of a page's rows, and its next-page link."""
    page = client.get("/triggers", params=params)
    assert page.status_code == 200, page.text
    ids = re.findall(r'<tr id="trigger-([^"]+)">', page.text)
    following = re.search(r'<a href="([^"]+)" id="next-page">', page.text)
    if not ids:
        assert 'id="none"' in page.text
    return ids, html.unescape(following.group(1)) if following else None


def test_a_search_and_a_state_filter_list_what_they_select(api: Api) -> None:
    for name in ("nightly", "job-03", "job-41"):
        api.post(f"/triggers/{name}/pause", {"note": "maintenance"})
    with httpx.Client(base_url=api.url.removesuffix("/api/v1"), timeout=30) as client:
        assert _rows(client, q="BACKUP") == (["nightly"], None)  # the description
        assert _rows(client, q="k_c") == (["disk_check"], None)  # `_` is itself
        assert _rows(client, q="%") == (["disk_check"], None)  # `%` is itself
        assert _rows(client, q="no such trigger") == ([], None)
        assert _rows(client, state="paused") == (["job-03", "job-41", "nightly"], None)
        assert _rows(client, q="job-4", state="paused") == (["job-41"], None)
        assert _rows(client, q="job-4", state="enabled")[0] == [
            f"job-{n}" for n in range(40, 50) if n != 41
        ]
        assert _rows(client, state="retired") == ([], None)
        assert _rows(client, state="failing") == ([], None)
        seen, following = _rows(client, q="JOB-", state="enabled")
        pages = 1
        while following is not None:
            more, following = _rows(client, **dict(httpx.URL(following).params))
            seen, pages = seen + more, pages + 1
        assert pages == 2
        assert seen == [job for job in JOBS if job not in ("job-03", "job-41")]
        unknown = client.get("/triggers", params={"state": "sleepy"})
        assert unknown.status_code == 400 and "unknown state" in unknown.text


def test_a_trigger_page_reads_in_one_transaction(api: Api) -> None:
    begun: list[str] = []

    def count(_conn: object) -> None:
        begun.append(threading.current_thread().name)

    with httpx.Client(base_url=api.url.removesuffix("/api/v1"), timeout=30) as client:
        assert client.get("/triggers/nightly").status_code == 200  # warm: nothing first-time
        sa.event.listen(api.backend.db.engine, "begin", count)
        try:
            for path in ("/triggers/nightly", "/triggers?state=paused", "/"):
                begun.clear()
                assert client.get(path).status_code == 200
                # The page's own thread (the runtime's threads may read meanwhile).
                served = [name for name in begun if name.startswith("AnyIO worker")]
                assert len(served) == 1, (path, begun)
        finally:
            sa.event.remove(api.backend.db.engine, "begin", count)
