"""Command attempts an earlier owner left in flight: adopt, record or start what is known.

A run loaded from the store has nothing in flight in this process. A command attempt
its log shows `dispatched` ran under a supervisor whose directory says what became
of it (`_effects.attempts.probe`):

- finished: its outcome is recorded now, as if it had just been reported;
- still running: this runtime waits for it (adopts it), as the previous one did;
- never started (the previous owner stopped between the dispatch and the start):
  it is started now, under the same attempt;
- unknown (another host, a reboot, a supervisor killed, known at once from its pid
  and start time even while its orphaned command runs on): it is ambiguous, with
  the reason and whatever output reached the attempt's files, and the planner parks
  the run or re-runs an idempotent step.

Other effects (Python and HTTP steps run inside the process that stopped) are left to
the planner, which calls them ambiguous.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from looms_runtime._effects import attempts
from looms_runtime._effects.command import result_of
from looms_runtime._effects.launch import EffectRunner
from looms_runtime._effects.secrets import redacted, secret_values
from looms_runtime._engine.attempts import effect_context
from looms_runtime._history.definitions import CommandStep, EffectStep, StepsFlow
from looms_runtime._history.events import NewEvent
from looms_runtime._history.fold import EffectState, RunState, fold
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.planner import Dispatch, outcome_events
from looms_runtime._store.loading import LoadedRun
from looms_runtime._workers.actors import Attempt, Slot

log = structlog.get_logger()


@dataclass(frozen=True, slots=True, kw_only=True)
class Reattached:
    """What reattaching a freshly loaded run found: events to append, the new state."""

    events: list[NewEvent]
    state: RunState


def attempt_dir(run_id: str, effect: EffectState) -> Path | None:
    """The directory of a supervised attempt, as its dispatch recorded it."""
    marker = effect.supervised
    if not marker or not marker.get("root"):
        return None
    return attempts.attempt_path(Path(marker["root"]), run_id, effect.effect_id, effect.attempt)


def reattach(
    slot: Slot,
    run: LoadedRun,
    state: RunState,
    *,
    runner: EffectRunner,
    now_ms: int,
    env_prefix: str,
    output_limit_bytes: int,
    on_done: Callable[[EffectResult], None],
) -> Reattached:
    """Settle what can be known of the command attempts left dispatched (module doc)."""
    events: list[NewEvent] = []
    run_id = run.header.run_id
    for effect in list(state.effects.values()):
        if (
            effect.status != "dispatched"
            or effect.kind != "command"
            or effect.effect_id in slot.in_flight()
        ):
            continue
        ids: dict[str, Any] = {"effect_id": effect.effect_id, "attempt": effect.attempt}
        path = attempt_dir(run_id, effect)
        found = (
            runner.probe(effect.supervised, path)
            if path is not None
            else attempts.Unknown("it ran before attempts were supervised")
        )
        bound = structlog.contextvars.bound_contextvars(**ids)
        step = _command_step(run, effect)
        if isinstance(found, attempts.Finished):
            with bound:
                log.info("effect_outcome_recovered", ok=found.result.get("ok"))
            # Its secrets, read again now, leave what it printed before it is recorded.
            result = result_of(redacted(found.result, secret_values(step)), ids)
            recorded = outcome_events(state, run.flow, result, now_ms=now_ms)
            events.extend(recorded)
            state = fold(recorded, state)
            slot.discard.append(path)
        elif isinstance(found, attempts.Running):
            assert path is not None  # noqa: S101 - Running needs a directory
            with bound:
                log.info("effect_adopted", supervisor_pid=found.supervisor_pid)
            token = runner.adopt(path, ids, on_done, step=step)
            slot.attempts[effect.effect_id] = Attempt(token, path)
        elif isinstance(found, attempts.NeverStarted):
            assert path is not None  # noqa: S101 - NeverStarted needs a directory
            with bound:
                log.info("effect_restarted", why="dispatched, never started")
            _restart(
                slot,
                run,
                effect,
                path,
                runner=runner,
                now_ms=now_ms,
                env_prefix=env_prefix,
                output_limit_bytes=output_limit_bytes,
                on_done=on_done,
            )
        else:
            with bound:
                log.warning("effect_outcome_unknown", why=found.why)
            output = redacted(found.output, secret_values(step))
            unknown = EffectResult(**ids, ok=False, error=found.why, ambiguous=True, output=output)
            recorded = outcome_events(state, run.flow, unknown, now_ms=now_ms)
            events.extend(recorded)
            state = fold(recorded, state)
    return Reattached(events=events, state=state)


def _command_step(run: LoadedRun, effect: EffectState) -> CommandStep | None:
    """The command step of a dispatched effect, for its secrets (None: not one)."""
    flow = run.flow
    if not isinstance(flow, StepsFlow) or effect.step_index >= len(flow.steps):
        return None
    step = flow.steps[effect.step_index]
    return step if isinstance(step, CommandStep) else None


def _restart(
    slot: Slot,
    run: LoadedRun,
    effect: EffectState,
    path: Path,
    *,
    runner: EffectRunner,
    now_ms: int,
    env_prefix: str,
    output_limit_bytes: int,
    on_done: Callable[[EffectResult], None],
) -> None:
    flow = run.flow
    assert isinstance(flow, StepsFlow)  # noqa: S101 - command effects belong to steps flows
    step = flow.steps[effect.step_index]
    assert isinstance(step, EffectStep)  # noqa: S101 - the fold checked the kind
    timeout_s = step.timeout_s
    if effect.give_up_at is not None:
        remaining = max(0.0, (effect.give_up_at - now_ms) / 1000)
        timeout_s = remaining if timeout_s is None else min(timeout_s, remaining)
    decision = Dispatch(
        event=NewEvent("effect_dispatched", {}),
        step=step,
        attempt=effect.attempt,
        deadline_at=effect.deadline_at,
    )
    ctx = effect_context(
        run, decision, env_prefix=env_prefix, output_limit_bytes=output_limit_bytes
    )
    token = runner.launch(step, ctx, on_done, timeout_s=timeout_s, path=path, restart=True)
    slot.attempts[effect.effect_id] = Attempt(token, path)
