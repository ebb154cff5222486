"""The runtime's contract, with steps on its own threads and in worker processes.

Every test of this directory runs twice per database: with Python steps and Python
flows' sessions on the runtime's threads, and in worker processes
(`worker_processes`), the daemon's default.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from looms_runtime import Database, Runtime
from tests.factories import MakeRuntime


@pytest.fixture(params=["threads", "processes"])
def make_runtime(request: pytest.FixtureRequest, looms_db: Database) -> Iterator[MakeRuntime]:
    """Runtimes on the test's database, closed at teardown, in each execution mode."""
    made: list[Runtime] = []
    processes = 2 if request.param == "processes" else 0

    def make(**options: Any) -> Runtime:
        options.setdefault("owner", f"test-{len(made)}")
        options.setdefault("worker_processes", processes)
        runtime = Runtime(looms_db, **options)
        made.append(runtime)
        return runtime

    yield make
    for runtime in reversed(made):
        runtime.close(timeout=5)
