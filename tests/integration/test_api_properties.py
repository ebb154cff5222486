"""Property-based: requests generated from the API's own OpenAPI document, valid and not,
against the served API on a real store: no answer is a 5xx, every answer has a status,
a content type and a body its document declares."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from looms_runtime.records import StartRequest
from tests.api_support import WRITE_TOKEN, served_api
from triggers.api._schemas import TIME_FORMAT

AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}"}
# What a time argument accepts (`triggers.times`), for the requests that must be accepted.
schemathesis.openapi.format(
    TIME_FORMAT,
    st.one_of(
        st.sampled_from(["now", "today", "yesterday", "tomorrow", "-2h", "+90m", "2h ago"]),
        st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)).map(  # noqa: DTZ001 (hypothesis wants naive bounds)
            lambda at: at.isoformat() + "Z"
        ),
    ),
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def api_schema(database_url: str, tmp_path: Path) -> Iterator[Any]:
    with served_api(database_url, tmp_path) as api:
        # Something to find: a ledger row, a waiting run, an operator action.
        api.post("/triggers/nightly/fire", {"key": "seed"})
        flow = api.declarations.flows["gated"]
        api.backend.runtime.start_run(
            StartRequest(
                flow="gated",
                version=flow.version,
                idempotency_key="gated:seed",
                attributes={"trigger_id": "gated"},
            )
        )
        yield schemathesis.openapi.from_url(f"{api.url}/openapi.json", headers=AUTH)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_request_meets_a_server_error(api_schema: Any, mode: GenerationMode) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) == 20
    untestable: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode, headers=AUTH))
        @settings(
            max_examples=40,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def answers(case: Any) -> None:
            case.call_and_validate(headers=AUTH)

        try:
            answers()
        except Unsatisfiable:
            # Nothing to break: no parameter, no body, and the token is the test's own.
            assert mode is GenerationMode.NEGATIVE, operation.path
            untestable.append(operation.path)
    # The two whose only parameter is a path's text, which any string satisfies, and the
    # probes and the pools, which take none.
    assert set(untestable) <= {
        "/api/v1/triggers",
        "/api/v1/pools",
        "/api/v1/runs/{run_id}",
        "/healthz",
        "/readyz",
    }, untestable
