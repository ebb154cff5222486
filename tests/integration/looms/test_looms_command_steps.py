"""Command steps as real subprocesses: environment, input, exit codes, timeouts, output."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from looms_runtime import Event, LoomsError, Runtime, StartRequest
from tests.factories import MakeRuntime


@pytest.fixture
def looms_db_url(looms_sqlite_url: str) -> str:
    """Subprocess behaviour does not depend on the database: SQLite only."""
    return looms_sqlite_url


def command(step_id: str, argv: list[str], **fields: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "type": "command",
        "argv": argv,
        "env": {},
        "cwd": None,
        "timeout_s": None,
        "retry": None,
        "idempotent": False,
    }
    step.update(fields)
    return step


def run_steps(runtime: Runtime, *steps: dict[str, Any], **request: Any) -> str:
    version = runtime.register_flow("flow", {"kind": "steps", "steps": list(steps)})
    handle = runtime.start_run(
        StartRequest(
            flow="flow", version=version, idempotency_key=request.pop("key", "k"), **request
        )
    )
    return handle.run_id


def outcome(runtime: Runtime, run_id: str, step_id: str) -> dict[str, Any]:
    for event in reversed(runtime.get_events(run_id)):
        ours = event.payload.get("effect_id") == step_id
        if ours and event.type.startswith("effect_") and event.type != "effect_dispatched":
            return dict(event.payload)
    raise AssertionError(f"no outcome for {step_id}")


PRINT_CONTEXT = (
    "import json, os, sys; "
    "print(json.dumps({'stdin': sys.stdin.read(), 'cwd': os.getcwd(), "
    "'env': {k: v for k, v in os.environ.items() if k.startswith(('LOOMS_', 'STEP_', 'RUN_'))}}))"
)


def test_command_gets_env_cwd_and_input(make_runtime: MakeRuntime, tmp_path: Path) -> None:
    runtime = make_runtime()
    runtime.start()
    step = command(
        "show", [sys.executable, "-c", PRINT_CONTEXT], env={"STEP_VAR": "s"}, cwd=str(tmp_path)
    )
    run_id = run_steps(runtime, step, input={"n": 1}, env={"RUN_VAR": "r"})

    assert runtime.wait_settled(run_id, 20).status == "completed"
    seen = json.loads(outcome(runtime, run_id, "show")["output"]["stdout"])
    assert json.loads(seen["stdin"]) == {"n": 1}
    assert seen["cwd"] == str(tmp_path)
    assert seen["env"] == {
        "STEP_VAR": "s",
        "RUN_VAR": "r",
        "LOOMS_RUN_ID": run_id,
        "LOOMS_STEP_ID": "show",
        "LOOMS_ATTEMPT": "1",
        "LOOMS_INPUT": '{"n":1}',
    }


def test_the_run_env_overrides_the_step_env_and_the_prefix_is_configurable(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime(env_prefix="TRIGGERS_")
    runtime.start()
    script = "import os; print(os.environ['SHARED'], os.environ['TRIGGERS_STEP_ID'])"
    step = command("show", [sys.executable, "-c", script], env={"SHARED": "step"})
    run_id = run_steps(runtime, step, env={"SHARED": "run"})

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert outcome(runtime, run_id, "show")["output"]["stdout"] == "run show\n"


def test_the_step_environment_replaces_this_processs_for_steps_and_supervisor(
    make_runtime: MakeRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_SECRET", "never-seen")
    base = {"PATH": "/usr/bin:/bin", "GIVEN": "g"}
    runtime = make_runtime(step_environment=base, attempts_dir=tmp_path / "attempts")
    runtime.start()
    script = (
        "import json, os; parent = open(f'/proc/{os.getppid()}/environ', 'rb').read(); "
        "print(json.dumps({'env': dict(os.environ), 'parent': parent.decode()}))"
    )
    step = command("show", [sys.executable, "-c", script], env={"STEP_VAR": "s"})
    run_id = run_steps(runtime, step)

    assert runtime.wait_settled(run_id, 20).status == "completed"
    seen = json.loads(outcome(runtime, run_id, "show")["output"]["stdout"])
    assert set(seen["env"]) - {"LC_CTYPE"} == {
        "PATH", "GIVEN", "STEP_VAR", "LOOMS_RUN_ID", "LOOMS_STEP_ID", "LOOMS_ATTEMPT",
        "LOOMS_INPUT",
    }  # fmt: skip
    assert "HOST_SECRET" not in seen["parent"], "the supervisor has the step environment too"
    assert "GIVEN=g" in seen["parent"]


def test_a_secret_that_cannot_be_read_fails_the_attempt_before_it_starts(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    missing = tmp_path / "absent"
    step = command("use", ["true"], secrets={"PGPASSWORD": {"file": str(missing)}})
    run_id = run_steps(runtime, step)

    assert runtime.wait_settled(run_id, 20).status == "failed"
    error = outcome(runtime, run_id, "use")["error"]
    assert error == f"cannot read the secret PGPASSWORD ({missing}): No such file or directory"


def test_a_malformed_secret_is_refused_when_the_flow_is_registered(
    make_runtime: MakeRuntime,
) -> None:
    runtime = make_runtime()
    step = command("use", ["true"], secrets={"A": {"file": "a", "credential": "b"}})
    with pytest.raises(LoomsError) as caught:
        runtime.register_flow("flow", {"kind": "steps", "steps": [step]})
    assert "steps[0].secrets: must map names to" in str(caught.value.details)


def test_non_zero_exit_fails_the_run_with_the_exit_code(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    step = command(
        "fail", [sys.executable, "-c", "import sys; print('bad', file=sys.stderr); sys.exit(3)"]
    )
    run_id = run_steps(runtime, step)

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert status.error == "step 'fail' failed after 1 attempt: exit code 3: bad"
    recorded = outcome(runtime, run_id, "fail")
    assert recorded["output"]["exit_code"] == 3
    assert recorded["output"]["stderr"] == "bad\n"
    assert recorded["next_attempt_at"] is None


def test_missing_program_fails_the_attempt(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    run_id = run_steps(runtime, command("ghost", ["/nonexistent/program"]))

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert "cannot start '/nonexistent/program'" in (status.error or "")


def test_timeout_stops_the_command_and_fails_the_attempt(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    run_id = run_steps(runtime, command("slow", ["sleep", "30"], timeout_s=0.2))

    status = runtime.wait_settled(run_id, 20)

    assert status.status == "failed"
    assert "timed out after 0.2s" in (status.error or "")
    recorded = outcome(runtime, run_id, "slow")
    assert recorded["output"]["timed_out"] is True
    assert recorded["output"]["signal"] == "SIGTERM"


def test_output_is_bounded_to_its_tail_and_marks_the_truncation(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime(output_limit_bytes=1000)
    runtime.start()
    script = "import sys; sys.stdout.write('x' * 5000 + 'THE END')"
    run_id = run_steps(runtime, command("loud", [sys.executable, "-c", script]))

    assert runtime.wait_settled(run_id, 20).status == "completed"
    output = outcome(runtime, run_id, "loud")["output"]
    assert len(output["stdout"]) == 1000
    assert output["stdout"].endswith("THE END")
    assert output["stdout_truncated_bytes"] == 4007


def test_steps_run_in_order_and_each_gets_the_run_input(
    make_runtime: MakeRuntime, tmp_path: Path
) -> None:
    runtime = make_runtime()
    runtime.start()
    log = tmp_path / "log"
    append = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + sys.stdin.read() + '\\n')"
    steps = [command(name, [sys.executable, "-c", append, str(log), name]) for name in ("a", "b")]
    run_id = run_steps(runtime, *steps, input=[7])

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert log.read_text() == "a[7]\nb[7]\n"


def test_a_large_input_reaches_the_command_on_stdin_only(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    script = "import os, sys; print(len(sys.stdin.read()), 'LOOMS_INPUT' in os.environ)"
    run_id = run_steps(runtime, command("big", [sys.executable, "-c", script]), input="x" * 200_000)

    assert runtime.wait_settled(run_id, 20).status == "completed"
    assert outcome(runtime, run_id, "big")["output"]["stdout"] == "200002 False\n"


def test_projection_folds_the_whole_log_in_order(make_runtime: MakeRuntime) -> None:
    runtime = make_runtime()
    runtime.start()
    run_id = run_steps(runtime, command("a", ["true"]), command("b", ["true"]))
    assert runtime.wait_settled(run_id, 20).status == "completed"

    def steps_done(done: list[str], event: Event) -> list[str]:
        if event.type == "effect_succeeded":
            return [*done, event.payload["effect_id"]]
        return done

    def seqs(seen: list[int], event: Event) -> list[int]:
        return [*seen, event.seq]

    no_steps: list[str] = []
    no_seqs: list[int] = []
    assert runtime.project(run_id, steps_done, no_steps) == ["a", "b"]
    assert runtime.project(run_id, seqs, no_seqs) == list(
        range(1, len(runtime.get_events(run_id)) + 1)
    )
