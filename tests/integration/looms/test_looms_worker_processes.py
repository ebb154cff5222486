"""Python steps and Python flows in worker processes: isolated, warm, replaced, never lost.

Each step here runs in a worker process of the runtime (`worker_processes`): the
step functions below are imported there, so what they share with the test goes
through files (`tmp_path`), never through this module's memory.
"""

from __future__ import annotations

import ctypes
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from looms_runtime import Runtime, StartRequest, StepContext
from looms_runtime.flow import FlowContext
from looms_runtime.testing import ManualClock
from tests.factories import MakeRuntime
from tests.support import wait_for

HERE = __name__
LEAK: list[bytes] = []

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Processes and their deaths do not depend on the database: SQLite."""
    return looms_sqlite_url


# -- steps, run in the workers ---------------------------------------------------------


def pid(_input: object) -> int:
    return os.getpid()


def leak(_input: object) -> int:
    LEAK.append(b"x" * (40 << 20))  # kept by the module: the process grows each call
    return os.getpid()


def segfault(_input: object) -> None:
    ctypes.string_at(0)


def exit_now(_input: object) -> None:
    os._exit(7)


def hold(data: dict[str, str], context: StepContext) -> int:
    """Write this process's pid, then wait for `release` (first attempt only)."""
    written = Path(data["pid_file"] + ".tmp")
    written.write_text(str(os.getpid()))
    written.replace(data["pid_file"])  # whole, or not there yet
    if context.attempt == 1:
        context.wait_cancelled(60) if data.get("patient") else _wait_file(data["release"])
    return context.attempt


def _wait_file(path: str) -> None:
    for _ in range(6000):
        if Path(path).exists():
            return
        os.sched_yield()
        ctypes.CDLL(None).usleep(10_000)


def flow_steps(ctx: FlowContext, data: dict[str, str]) -> dict[str, Any]:
    first = ctx.step("first", pid, None)
    ctx.sleep(0)
    second, third = ctx.parallel(ctx.branch("b", pid, None), ctx.branch("c", pid, None))
    held = ctx.step("held", hold, data, idempotent=bool(data.get("idempotent")))
    return {"pids": [first, second, third], "held": held, "now": ctx.now().isoformat()}


def flow_exits(ctx: FlowContext, _data: None) -> None:
    ctx.step("fine", pid, None)
    os._exit(9)


# -- helpers ---------------------------------------------------------------------------


def start(runtime: Runtime, name: str, definition: dict[str, Any], data: Any = None) -> str:
    version = runtime.register_flow(name, definition)
    request = StartRequest(flow=name, version=version, input=data, idempotency_key=name)
    return runtime.start_run(request).run_id


def step_flow(function: str, **step: Any) -> dict[str, Any]:
    return {
        "kind": "steps",
        "steps": [{"id": "s", "type": "python", "ref": f"{HERE}:{function}", **step}],
    }


def output(runtime: Runtime, run_id: str) -> Any:
    found = [e.payload for e in runtime.get_events(run_id) if e.type == "effect_succeeded"]
    return found[-1]["output"]


def alive(pid_number: int) -> bool:
    try:
        os.kill(pid_number, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid_number}/stat").read_text().split(") ")[1].startswith("Z")


# -- tests -----------------------------------------------------------------------------


def test_a_python_step_runs_in_a_warm_worker_process_not_in_the_runtime(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    first = start(runtime, "one", step_flow("pid"))
    assert runtime.wait_settled(first, 30).status == "completed"
    second = start(runtime, "two", step_flow("pid"))
    assert runtime.wait_settled(second, 30).status == "completed"

    worker = output(runtime, first)
    assert worker != os.getpid()
    assert output(runtime, second) == worker  # the same process: its imports kept


def test_a_leaking_worker_is_replaced_once_past_its_memory_limit(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime(worker_processes=1, worker_max_rss_bytes=60 << 20)
    runtime.start()
    with capture_logs() as logs:
        pids = []
        for name in ("a", "b", "c"):
            run_id = start(runtime, name, step_flow("leak"))
            assert runtime.wait_settled(run_id, 30).status == "completed"
            pids.append(output(runtime, run_id))

    assert len(set(pids)) == 3  # each call's 40 MiB put its process over 60 MiB
    recycled = [line for line in logs if line["event"] == "worker_recycled"]
    assert recycled
    assert "resident memory" in recycled[0]["why"]


def test_a_worker_is_replaced_after_its_number_of_tasks(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime(worker_processes=1, worker_max_tasks=2)
    runtime.start()
    pids = []
    for name in ("a", "b", "c"):
        run_id = start(runtime, name, step_flow("pid"))
        assert runtime.wait_settled(run_id, 30).status == "completed"
        pids.append(output(runtime, run_id))

    assert pids[0] == pids[1] != pids[2]


@pytest.mark.parametrize(
    ("function", "how"), [("segfault", "SIGSEGV"), ("exit_now", "exit code 7")]
)
def test_a_step_that_kills_its_worker_fails_that_step_and_nothing_else(
    make_runtime: MakeRuntime, function: str, how: str
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    crashed = start(runtime, "crash", step_flow(function))

    wait_for(lambda: runtime.inspect_run(crashed).state == "parked")
    [effect] = runtime.inspect_run(crashed).effects
    assert effect.status == "ambiguous"
    assert how in (effect.last_error or "")
    # The runtime goes on: the next Python step runs in a new worker.
    after = start(runtime, "after", step_flow("pid"))
    assert runtime.wait_settled(after, 30).status == "completed"
    assert output(runtime, after) != os.getpid()


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_worker_killed_mid_step_reruns_an_idempotent_step_and_parks_another(
    make_runtime: MakeRuntime, tmp_path: Path, idempotent: bool
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    data = {"pid_file": str(tmp_path / "pid"), "release": str(tmp_path / "release")}
    run_id = start(runtime, "held", step_flow("hold", idempotent=idempotent), data)
    wait_for((tmp_path / "pid").exists)

    os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)

    if idempotent:
        assert runtime.wait_settled(run_id, 30).status == "completed"
        assert output(runtime, run_id) == 2  # the second attempt's
    else:
        wait_for(lambda: runtime.inspect_run(run_id).state == "parked")
        assert "killed by SIGKILL" in (runtime.inspect_run(run_id).effects[0].last_error or "")


def test_a_step_past_its_timeout_has_its_worker_stopped(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    warm = start(runtime, "warm", step_flow("pid"))  # this module imported: not timed
    assert runtime.wait_settled(warm, 30).status == "completed"
    data = {"pid_file": str(tmp_path / "pid"), "release": str(tmp_path / "never")}
    run_id = start(runtime, "slow", step_flow("hold", timeout_s=0.5), data)

    settled = runtime.wait_settled(run_id, 30)
    assert settled.status == "failed"
    assert "timed out after 0.5s" in (settled.error or "")
    wait_for(lambda: not alive(int((tmp_path / "pid").read_text())))


def test_a_cancelled_step_in_a_worker_sees_the_cancel(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    data = {"pid_file": str(tmp_path / "pid"), "release": "", "patient": "yes"}
    run_id = start(runtime, "patient", step_flow("hold"), data)
    wait_for((tmp_path / "pid").exists)

    runtime.cancel(run_id, reason="test", grace=timedelta(seconds=20))

    assert runtime.wait_settled(run_id, 30).status == "cancelled"


def test_a_python_flow_runs_in_a_worker_with_the_runtimes_clock(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    clock = ManualClock(datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC))
    runtime = make_runtime(worker_processes=2, clock=clock)
    runtime.start()
    (tmp_path / "release").touch()
    data = {"pid_file": str(tmp_path / "pid"), "release": str(tmp_path / "release")}
    run_id = start(runtime, "flow", {"kind": "python", "ref": f"{HERE}:flow_steps"}, data)

    settled = runtime.wait_settled(run_id, 30)
    assert settled.status == "completed", settled.error
    result = runtime.statuses([run_id])[run_id]
    assert result.status == "completed"
    events = runtime.get_events(run_id)
    done = next(e.payload["result"] for e in events if e.type == "run_completed")
    assert os.getpid() not in done["pids"]
    assert done["now"] == "2031-05-06T07:08:09+00:00"


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_flow_whose_worker_is_killed_mid_step_reruns_or_parks_that_step(
    make_runtime: MakeRuntime, tmp_path: Path, idempotent: bool
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    data = {
        "pid_file": str(tmp_path / "pid"),
        "release": str(tmp_path / "release"),
        **({"idempotent": "yes"} if idempotent else {}),
    }
    run_id = start(runtime, "flow", {"kind": "python", "ref": f"{HERE}:flow_steps"}, data)
    wait_for((tmp_path / "pid").exists)

    os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)

    if idempotent:
        assert runtime.wait_settled(run_id, 30).status == "completed"
        held = [e for e in runtime.get_events(run_id) if e.payload.get("effect_id") == "held#4"]
        assert [e.type for e in held] == [
            "effect_dispatched",
            "effect_ambiguous",
            "effect_retry_requested",  # the idempotent rule
            "effect_dispatched",
            "effect_succeeded",
        ]
    else:
        wait_for(lambda: runtime.inspect_run(run_id).state == "parked")
        info = runtime.inspect_run(run_id)
        assert [(e.effect_id, e.status) for e in info.effects] == [("held#4", "ambiguous")]
        assert "worker process" in (info.effects[0].last_error or "")


def test_a_flow_whose_own_code_kills_its_worker_fails_after_three_tries(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    run_id = start(runtime, "exits", {"kind": "python", "ref": f"{HERE}:flow_exits"})

    settled = runtime.wait_settled(run_id, 60)
    assert settled.status == "failed"
    assert "exit code 9" in (settled.error or "")
    assert "3 times" in (settled.error or "")
    # The step before the crash ran once: the replays answered it from the log.
    fine = [e for e in runtime.get_events(run_id) if e.type == "effect_dispatched"]
    assert len(fine) == 1


def test_workers_are_replaced_when_a_module_they_imported_changed(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "changing_steps.py"
    module.write_text("import os\n\ndef which(_input):\n    return ['one', os.getpid()]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runtime = make_runtime(worker_processes=1)
    runtime.start()
    flow = {
        "kind": "steps",
        "steps": [{"id": "s", "type": "python", "ref": "changing_steps:which"}],
    }
    first = start(runtime, "first", flow)
    assert runtime.wait_settled(first, 30).status == "completed"
    assert runtime.refresh_workers() is False  # nothing changed

    module.write_text("import os\n\ndef which(_input):\n    return ['two', os.getpid()]\n")
    os.utime(module, ns=(1, 1))  # a different mtime, however fast the rewrite was
    assert runtime.refresh_workers() is True
    second = start(runtime, "second", flow)
    assert runtime.wait_settled(second, 30).status == "completed"

    assert output(runtime, first)[0] == "one"
    assert output(runtime, second)[0] == "two"
    assert output(runtime, second)[1] != output(runtime, first)[1]


def test_steps_queued_behind_a_long_step_run_on_the_other_worker(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime(worker_processes=2)
    runtime.start()
    data = {"pid_file": str(tmp_path / "pid"), "release": str(tmp_path / "release")}
    long_run = start(runtime, "long", step_flow("hold"), data)
    wait_for((tmp_path / "pid").exists)
    version = runtime.register_flow("short", step_flow("pid"))
    requests = [
        StartRequest(flow="short", version=version, idempotency_key=f"short-{n}") for n in range(12)
    ]
    shorts = [handle.run_id for handle in runtime.start_runs(requests)]  # type: ignore[union-attr]

    for run_id in shorts:
        assert runtime.wait_settled(run_id, 30).status == "completed"
    assert runtime.statuses([long_run])[long_run].status == "active"  # still held
    held_by = int((tmp_path / "pid").read_text())
    assert held_by not in {output(runtime, run_id) for run_id in shorts}
    (tmp_path / "release").touch()
    assert runtime.wait_settled(long_run, 30).status == "completed"
