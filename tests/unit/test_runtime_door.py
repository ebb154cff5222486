"""The one error door: each runtime error leaves as the `triggers` error of its meaning,
and the CLI and the API give that error one meaning (exit 75 is HTTP 503)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest

from looms_runtime import errors as looms
from triggers import errors
from triggers.api._errors import status_of
from triggers.runner.door import runner_door, runtime_door, translated
from triggers.runner.runs import RunControls, RunReads


@pytest.mark.parametrize(
    ("error", "meaning", "exit_code", "status"),
    [
        (looms.RunNotFoundError("no run 'x'"), errors.UnknownRunError, 2, 404),
        (looms.InvalidRequestError("bad limit"), errors.RunRequestError, 2, 400),
        (looms.EffectNotRetryableError("not stuck"), errors.RunConflictError, 2, 409),
        (looms.SignalConflictError("key reused"), errors.RunConflictError, 2, 409),
        (looms.StartConflictError("key reused"), errors.RunnerRefusedError, 1, 409),
        (looms.KeyPurgedError("purged"), errors.RunnerRefusedError, 1, 409),
        (looms.UnknownFlowError("no flow"), errors.RunnerRefusedError, 1, 409),
        (looms.InvalidFlowError("bad flow"), errors.DeclarationError, 2, 400),
        (looms.RunOverloadedError("queue full"), errors.RunnerUnavailableError, 75, 503),
        (looms.RuntimeClosedError("closed"), errors.RunnerUnavailableError, 75, 503),
        (looms.DatabaseUnavailableError("down"), errors.RunnerUnavailableError, 75, 503),
        (looms.CorruptHistoryError("gap"), errors.RunnerError, 1, 500),
        (looms.LoomsError("unclassified"), errors.RunnerError, 1, 500),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_a_runtime_error_means_one_triggers_error_in_the_cli_and_the_api(
    error: looms.LoomsError, meaning: type[errors.TriggersError], exit_code: int, status: int
) -> None:
    found = translated(error)

    assert type(found) is meaning
    assert int(found.exit_code) == exit_code
    assert status_of(found) == status
    assert found.message == error.message
    assert found.details["runtime_code"] == error.code


def test_a_transient_error_the_door_does_not_name_is_temporary() -> None:
    class Flaky(looms.DatabaseError):
        transient = True

    assert type(translated(Flaky("blip"))) is errors.RunnerUnavailableError


def test_the_door_keeps_the_details_and_prefixes_what_it_was_doing() -> None:
    with pytest.raises(errors.RunnerRefusedError) as raised, runtime_door("starting"):
        raise looms.StartConflictError("key reused", run_id="r-1")

    assert raised.value.message == "starting: key reused"
    assert raised.value.details == {"run_id": "r-1", "runtime_code": "LMS-401"}
    assert isinstance(raised.value.__cause__, looms.StartConflictError)


def test_the_runner_door_raises_runner_errors_only() -> None:
    with pytest.raises(errors.RunnerError) as raised, runner_door("cancelling"):
        raise looms.RunNotFoundError("no run 'x'")

    assert type(raised.value) is errors.RunnerError
    assert raised.value.details["runtime_code"] == "LMS-403"


class _Refusing:
    """A runtime whose every call raises `error`."""

    def __init__(self, error: looms.LoomsError) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def call(*_args: object, **_kwargs: object) -> None:
            raise self.error

        return call


def _calls(runs: RunControls) -> Sequence[Any]:
    return [
        lambda: runs.statuses(["x"]),
        lambda: runs.inspect_run("x"),
        lambda: runs.list_runs(status="parked"),
        lambda: runs.count_runs(status="parked"),
        lambda: runs.get_events("x"),
        lambda: runs.cancel("x", reason="why"),
        lambda: runs.retry_effect("x", "e"),
        lambda: runs.signal("x", "go", None),
    ]


@pytest.mark.parametrize("index", range(8))
def test_every_call_on_the_runs_goes_through_the_door(index: int) -> None:
    runs = RunControls(cast("Any", _Refusing(looms.RunOverloadedError("queue full"))))

    with pytest.raises(errors.RunnerUnavailableError):
        _calls(runs)[index]()


def test_the_reads_of_a_database_answer_through_the_door() -> None:
    reads = RunReads(cast("Any", _Refusing(looms.RunNotFoundError("no run 'ghost'"))))

    with pytest.raises(errors.UnknownRunError, match="no run 'ghost'"):
        reads.inspect_run("ghost")
