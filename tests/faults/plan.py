"""The declarations a fault run applies: every-N-seconds triggers whose steps log each run.

Every command step appends one line when it starts and one when it ends to the
execution log, so the log tells, independently of the daemon, which step of which
run executed how many times, and when:

    <trigger> <occurrence> <run id> <step> <attempt> start|end <epoch seconds> <shell pid>
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSpec:
    """One command step: it sleeps `seconds` between its two log lines."""

    id: str
    seconds: float
    idempotent: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerSpec:
    """One `every` trigger (anchored at the Unix epoch) and the steps of its flow, in order."""

    id: str
    every_s: int
    overlap: str
    steps: tuple[StepSpec, ...]
    max_active: int | None = None
    catchup: str | None = None
    """A catch-up policy (`latest`, `all`, `none`); None: the default."""

    @property
    def every_ms(self) -> int:
        return self.every_s * 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The triggers of one run; each has `end` so the last occurrence is known in advance."""

    triggers: tuple[TriggerSpec, ...]
    step_env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for every step (e.g. to keep libfaketime out of the steps)."""

    def by_id(self) -> dict[str, TriggerSpec]:
        return {spec.id: spec for spec in self.triggers}

    def longest_run_s(self) -> float:
        return max((sum(s.seconds for s in t.steps) for t in self.triggers), default=0.0)


def _step_command(step: StepSpec, log: Path) -> list[str]:
    fields = (
        '"$TRIGGERS_TRIGGER_ID" "$TRIGGERS_OCCURRENCE" "$TRIGGERS_RUN_ID" '
        '"$TRIGGERS_STEP_ID" "$TRIGGERS_ATTEMPT"'
    )
    target = shlex.quote(str(log))

    def line(phase: str) -> str:
        return (
            f"printf '%s %s %s %s %s {phase} %s %s\\n' {fields} \"$(date +%s.%N)\" $$ >> {target}"
        )

    return ["sh", "-c", f"{line('start')}; sleep {step.seconds:g}; {line('end')}"]


def declarations(plan: Plan, *, log: Path, end_at: datetime) -> str:
    """The YAML text of `plan`: one flow per trigger, every trigger ending at `end_at`."""
    end = end_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    lines = ["version: 1", "flows:"]
    for spec in plan.triggers:
        lines.append(f"  {spec.id}-flow:")
        if not spec.steps:
            lines.append("    steps: []")
            continue
        lines.append("    steps:")
        for step in spec.steps:
            lines.append(f"      - id: {step.id}")
            lines.append(f"        run: {json.dumps(_step_command(step, log))}")
            lines.append(f"        idempotent: {'true' if step.idempotent else 'false'}")
            lines.append(f"        timeout: {int(step.seconds) + 120}s")
            if plan.step_env:
                lines.append(f"        env: {json.dumps(dict(plan.step_env))}")
    lines.append("triggers:")
    for spec in plan.triggers:
        lines.append(f"  - id: {spec.id}")
        lines.append(f"    flow: {spec.id}-flow")
        lines.append(f"    every: {spec.every_s}s")
        lines.append(f"    overlap: {spec.overlap}")
        lines.append(f'    end: "{end}"')
        if spec.max_active is not None:
            lines.append(f"    max_active: {spec.max_active}")
        if spec.catchup is not None:
            lines.append(f"    catchup: {{policy: {spec.catchup}}}")
    return "\n".join(lines) + "\n"


def steps(*specs: tuple[str, float, bool]) -> tuple[StepSpec, ...]:
    """Shorthand: `steps(("a", 0.5, False), ("b", 0.2, True))`."""
    return tuple(StepSpec(id=i, seconds=s, idempotent=idem) for i, s, idem in specs)


def mixed(*, long_s: float = 3.0, burst: int = 0) -> Plan:
    """Every-second and every-2s triggers over skip, buffer and allow, (non-)idempotent steps.

    `burst` adds that many every-second triggers with a short non-idempotent step, so
    each second launches and dispatches more runs at once (more for a kill to cut).
    """
    extra = tuple(
        TriggerSpec(
            id=f"burst-{n}",
            every_s=1,
            overlap="allow",
            max_active=2,
            steps=steps(("s", 0.2, False)),
        )
        for n in range(burst)
    )
    return Plan(
        triggers=(
            *extra,
            TriggerSpec(id="skip-short", every_s=1, overlap="skip", steps=steps(("s", 0.3, False))),
            TriggerSpec(
                id="skip-long", every_s=2, overlap="skip", steps=steps(("s", long_s, False))
            ),
            TriggerSpec(
                id="buffer-mid", every_s=1, overlap="buffer", steps=steps(("s", 1.5, False))
            ),
            TriggerSpec(
                id="allow-idem",
                every_s=1,
                overlap="allow",
                max_active=4,
                steps=steps(("s", 0.6, True)),
            ),
            TriggerSpec(
                id="two-step",
                every_s=2,
                overlap="skip",
                steps=steps(("a", 0.5, False), ("b", 0.5, True)),
            ),
            TriggerSpec(id="noop", every_s=1, overlap="allow", max_active=2, steps=()),
        )
    )


def command_storm(*, triggers: int = 20, steps_per_run: int = 2, step_s: float = 0.1) -> Plan:
    """Every-second triggers of several short command steps each: `triggers` times
    `steps_per_run` command steps a second (20 x 2: 40 a second), for a kill storm."""
    return Plan(
        triggers=tuple(
            TriggerSpec(
                id=f"storm-{n:02d}",
                every_s=1,
                overlap="allow",
                max_active=3,
                steps=steps(*((f"s{k}", step_s, k % 2 == 1) for k in range(steps_per_run))),
            )
            for n in range(triggers)
        )
    )


def long_steps(*, seconds: float) -> Plan:
    """Steps longer than the shutdown grace: what a SIGTERM must neither wait on nor orphan."""
    return Plan(
        triggers=(
            TriggerSpec(
                id="long-skip", every_s=2, overlap="skip", steps=steps(("s", seconds, False))
            ),
            TriggerSpec(
                id="long-allow",
                every_s=2,
                overlap="allow",
                max_active=3,
                steps=steps(("s", seconds, False)),
            ),
            # Shorter than the shutdown grace: it ends while a stopping daemon waits.
            TriggerSpec(id="mid-skip", every_s=2, overlap="skip", steps=steps(("s", 4.0, False))),
            TriggerSpec(
                id="long-idem", every_s=2, overlap="skip", steps=steps(("s", seconds - 2, True))
            ),
            TriggerSpec(id="tick", every_s=1, overlap="skip", steps=steps(("s", 0.2, False))),
        )
    )


def clock_jumps(*, step_env: Mapping[str, str]) -> Plan:
    """Triggers whose catch-up policies differ, to see a forward jump accounted by each."""
    return Plan(
        triggers=(
            TriggerSpec(id="latest", every_s=1, overlap="skip", steps=steps(("s", 0.3, False))),
            TriggerSpec(
                id="all",
                every_s=2,
                overlap="allow",
                max_active=3,
                catchup="all",
                steps=steps(("s", 0.3, False)),
            ),
            TriggerSpec(
                id="none", every_s=1, overlap="skip", catchup="none", steps=steps(("s", 0.2, True))
            ),
            TriggerSpec(id="buffer", every_s=1, overlap="buffer", steps=steps(("s", 1.2, False))),
        ),
        step_env=step_env,
    )
