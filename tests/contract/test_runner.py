"""The Runner contract, run against the test fake, the simulation's runner and the looms runner.

The fake stands in for the runtime in the scheduler's suites; this suite keeps it
honest: whatever the fake does on a start, a repeated key, a conflicting key, an
inspection, a cancel or a settlement, the looms runner does too (on SQLite and
PostgreSQL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from looms_runtime import Database, Runtime
from tests.factories import MakeRuntime
from triggers.errors import RunnerRefusedError
from triggers.model import RunStatus
from triggers.runner.fake import FakeRunner
from triggers.runner.looms import LoomsRunner
from triggers.runner.protocol import LaunchRequest, RunHandle, Runner
from triggers.runner.simulated import SimulatedRunner

OCCURRENCE = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
WAITING = {
    "kind": "steps",
    "steps": [{"id": "gate", "type": "wait_signal", "signal": "go", "timeout_s": 60}],
}


@dataclass
class Subject:
    """A runner, the flow its requests name, and how to end one of its runs."""

    runner: Runner
    flow_version: str
    finish: Callable[[str], object]


@pytest.fixture(
    params=[
        "fake",
        "simulated",
        "looms-sqlite",
        pytest.param("looms-postgres", marks=pytest.mark.postgres),
    ]
)
def subject(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param == "fake":
        fake = FakeRunner()
        yield Subject(runner=fake, flow_version="v1", finish=fake.settle)
        return
    if request.param == "simulated":
        elapsed = [OCCURRENCE]
        simulated = SimulatedRunner(elapsed=lambda: elapsed[0], duration=lambda _: HOUR)

        def finish(_run_id: str) -> None:
            elapsed[0] += HOUR  # every run started so far has lasted its hour
            simulated.settle_due(elapsed[0])

        yield Subject(runner=simulated, flow_version="v1", finish=finish)
        return
    engine = request.param.removeprefix("looms-")
    db = Database(str(request.getfixturevalue(f"looms_{engine}_url")))
    runner = LoomsRunner()
    runtime = Runtime(db, owner="contract", on_settled=runner.notify, env_prefix="TRIGGERS_")
    runner.attach(runtime)
    version = runtime.register_flow("flow", WAITING)
    runtime.start()
    try:
        yield Subject(
            runner=runner, flow_version=version, finish=lambda run_id: runtime.signal(run_id, "go")
        )
    finally:
        runtime.close(timeout=5)
        db.dispose()


def launch(subject: Subject, key: str, *, input_value: object = None) -> LaunchRequest:
    return LaunchRequest(
        idempotency_key=key,
        flow="flow",
        flow_version=subject.flow_version,
        input=input_value,
        trigger_id="t1",
        occurrence_at=OCCURRENCE,
    )


def started(subject: Subject, *requests: LaunchRequest) -> list[RunHandle]:
    results = subject.runner.start(list(requests))
    assert all(isinstance(result, RunHandle) for result in results), results
    return [result for result in results if isinstance(result, RunHandle)]


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        done.wait(0.02)
    raise AssertionError("condition not reached in time")


def test_a_start_answers_one_new_run_per_request_in_order(subject: Subject) -> None:
    first, second = started(subject, launch(subject, "t1:a"), launch(subject, "t1:b"))

    assert first.created and second.created
    assert first.run_id != second.run_id


def test_the_same_key_again_answers_the_same_run_not_created(subject: Subject) -> None:
    (first,) = started(subject, launch(subject, "t1:a"))

    (again,) = started(subject, launch(subject, "t1:a"))

    assert again == RunHandle(run_id=first.run_id, created=False)


def test_a_key_reused_with_another_input_is_refused_naming_its_run(subject: Subject) -> None:
    (first,) = started(subject, launch(subject, "t1:a", input_value={"n": 1}))

    [refused] = subject.runner.start([launch(subject, "t1:a", input_value={"n": 2})])

    assert isinstance(refused, RunnerRefusedError)
    assert refused.details["run_id"] == first.run_id


def test_inspect_answers_active_runs_and_missing_ids(subject: Subject) -> None:
    (run,) = started(subject, launch(subject, "t1:a"))

    found = subject.runner.inspect([run.run_id, "no-such-run"])

    assert found == {
        run.run_id: RunStatus(state="active"),
        "no-such-run": RunStatus(state="missing"),
    }


def test_a_settled_run_is_reported_to_subscribers_and_inspected_settled(subject: Subject) -> None:
    reports: list[tuple[str, RunStatus]] = []
    subject.runner.subscribe(lambda run_id, status: reports.append((run_id, status)))
    (run,) = started(subject, launch(subject, "t1:a"))

    subject.finish(run.run_id)

    wait_until(lambda: reports == [(run.run_id, RunStatus(state="completed"))])
    assert subject.runner.inspect([run.run_id])[run.run_id].state == "completed"


def test_a_cancelled_run_ends_cancelled_and_a_second_cancel_changes_nothing(
    subject: Subject,
) -> None:
    (run,) = started(subject, launch(subject, "t1:a"))

    subject.runner.cancel(run.run_id)
    wait_until(lambda: subject.runner.inspect([run.run_id])[run.run_id].state == "cancelled")
    subject.runner.cancel(run.run_id)

    assert subject.runner.inspect([run.run_id])[run.run_id].state == "cancelled"


def test_a_looms_run_carries_its_trigger_and_occurrence(make_runtime: MakeRuntime) -> None:
    runner = LoomsRunner()
    runtime = make_runtime(on_settled=runner.notify)
    runner.attach(runtime)
    version = runtime.register_flow("flow", WAITING)
    subject = Subject(runner=runner, flow_version=version, finish=runtime.cancel)

    (run,) = started(subject, launch(subject, "t1:2026-01-01T00:00:00Z"))

    info = runtime.inspect_run(run.run_id)
    assert info.idempotency_key == "t1:2026-01-01T00:00:00Z"
    assert info.attributes == {"trigger_id": "t1", "occurrence": "2026-01-01T00:00:00.000Z"}


def test_a_looms_runner_refuses_an_unknown_flow_version(looms_db: Database) -> None:
    runner = LoomsRunner()
    runtime = Runtime(looms_db, owner="x")
    runner.attach(runtime)
    try:
        [refused] = runner.start([launch(Subject(runner, "0000", runtime.cancel), "t1:a")])
    finally:
        runtime.close()

    assert isinstance(refused, RunnerRefusedError)
