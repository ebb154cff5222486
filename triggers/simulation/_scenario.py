"""What a simulation is asked: declarations, a range, run durations and events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from triggers.clock import iso
from triggers.errors import InputError
from triggers.model import FireRecord, TriggerSpec

DEFAULT_DURATION = timedelta(0)
"""How long a run lasts when no `--duration` says: no time (a default of its own
would invent overlaps, such as an every-30s trigger's runs each lasting a minute)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Downtime:
    """No daemon runs from `start_at` until `end_at`."""

    start_at: datetime
    end_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Pause:
    """An operator pauses `trigger_id` at `start_at` and resumes it at `end_at`
    (None: it stays paused)."""

    trigger_id: str
    start_at: datetime
    end_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockJump:
    """At `at`, the daemon's wall clock steps by `by` (forwards or backwards)."""

    at: datetime
    by: timedelta


@dataclass(frozen=True, slots=True, kw_only=True)
class Edit:
    """At `at`, these declarations are applied (as `triggers apply` would: triggers
    missing from them are retired)."""

    at: datetime
    specs: Sequence[TriggerSpec]
    source: str = ""
    """Where they came from (a file name), for messages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """Every run of `trigger_id` that starts from `start_at` to `end_at` (both
    included; the same instant for one run) fails instead of completing."""

    trigger_id: str
    start_at: datetime
    end_at: datetime


FAILED_ERROR = "failed by simulate --fail"
"""The error of a run a `Failure` fails, as the ledger shows it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A simulation to run: the declarations applied at `start_at`, the range
    [`start_at`, `end_at`], how long each trigger's runs last, and what happens.

    Every instant is on the simulation's own timeline, elapsed time: a clock jump
    moves the daemon's wall clock, not the instants of the other events, and a run
    lasts its duration of elapsed time whatever the clock reads meanwhile.
    """

    specs: Sequence[TriggerSpec]
    start_at: datetime
    end_at: datetime
    durations: Mapping[str, timedelta] = field(default_factory=dict)
    default_duration: timedelta = DEFAULT_DURATION
    downtimes: Sequence[Downtime] = ()
    pauses: Sequence[Pause] = ()
    jumps: Sequence[ClockJump] = ()
    edits: Sequence[Edit] = ()
    failures: Sequence[Failure] = ()

    def check(self) -> None:
        """Refuse what cannot be simulated, naming the option.

        Raises:
            InputError: an empty range, an event or duration naming an unknown
                trigger, a negative duration, a range that ends before it starts.
        """
        if self.end_at <= self.start_at:
            raise InputError(
                f"--to ({iso(self.end_at)}) must be after --from ({iso(self.start_at)})"
            )
        known = {spec.id for spec in self.specs}
        for edit in self.edits:
            known |= {spec.id for spec in edit.specs}
        for trigger_id, duration in self.durations.items():
            if trigger_id not in known:
                raise InputError(f"--duration {trigger_id}=...: {_unknown(trigger_id, known)}")
            if duration < timedelta(0):
                raise InputError(f"--duration {trigger_id}=...: a run cannot last less than 0")
        if self.default_duration < timedelta(0):
            raise InputError("--duration: a run cannot last less than 0")
        for down in self.downtimes:
            if down.end_at <= down.start_at:
                raise InputError(
                    f"--down {iso(down.start_at)}..{iso(down.end_at)}: it ends before it starts"
                )
        for pause in self.pauses:
            if pause.trigger_id not in known:
                raise InputError(
                    f"--pause {pause.trigger_id}@...: {_unknown(pause.trigger_id, known)}"
                )
            if pause.end_at is not None and pause.end_at <= pause.start_at:
                raise InputError(
                    f"--pause {pause.trigger_id}@{iso(pause.start_at)}..{iso(pause.end_at)}: "
                    "it ends before it starts"
                )
        for failure in self.failures:
            if failure.trigger_id not in known:
                raise InputError(
                    f"--fail {failure.trigger_id}@...: {_unknown(failure.trigger_id, known)}"
                )
        for jump in self.jumps:
            if not jump.by:
                raise InputError(f"--jump {iso(jump.at)}=...: a jump of 0 changes nothing")

    def duration_of(self, trigger_id: str) -> timedelta:
        return self.durations.get(trigger_id, self.default_duration)

    def fails(self, trigger_id: str, started_at: datetime) -> bool:
        """Whether the run of `trigger_id` that starts at `started_at` fails."""
        return any(
            failure.trigger_id == trigger_id and failure.start_at <= started_at <= failure.end_at
            for failure in self.failures
        )

    def warnings(self) -> list[str]:
        """A run longer than its trigger's period, said before the ledger shows its
        skips (or buffers): a duration given for all may fit one trigger, not another."""
        from triggers.durations import format_duration  # noqa: PLC0415
        from triggers.scheduler.occurrences import (  # noqa: PLC0415
            compile_schedule,
            next_occurrences,
        )

        longer: dict[tuple[str, timedelta, timedelta], list[TriggerSpec]] = {}
        for spec in self.specs:
            duration = self.duration_of(spec.id)
            if duration <= timedelta(0):
                continue
            schedule = compile_schedule(
                spec.schedule, trigger_id=spec.id, timezone=spec.timezone, validated=True
            )
            first = next_occurrences(schedule, after=self.start_at, count=2)
            if len(first) < 2 or first[1] - first[0] >= duration:  # noqa: PLR2004 - two
                continue
            given = f"{spec.id}=" if spec.id in self.durations else ""
            longer.setdefault((given, duration, first[1] - first[0]), []).append(spec)
        said = []
        for (given, duration, period), specs in longer.items():
            names = ", ".join(spec.id for spec in specs)
            policies = ", ".join(sorted({spec.overlap.value for spec in specs}))
            whose = f"{names}'s period" if len(specs) == 1 else f"the period of {names}"
            said.append(
                f"--duration {given}{format_duration(duration)}: longer than {whose} "
                f"({format_duration(period)}): the next occurrences meet the overlap "
                f"policy ({policies})"
            )
        return said


def _unknown(trigger_id: str, known: set[str]) -> str:
    names = ", ".join(sorted(known)[:20])
    return f"no trigger {trigger_id!r} in the declarations" + (
        f" (known: {names})" if names else ""
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    """A span of the daemon's wall clock, as the ledger's instants read it."""

    start_at: datetime
    end_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """The ledger a simulation left, and when its daemon was down."""

    records: list[FireRecord]
    """Every ledger row, oldest occurrence first (ranges collapsed as in `history`)."""
    downtime: list[Interval]
    """When no daemon ran, on the ledger's clock, within the range."""
    start_at: datetime
    end_at: datetime
    ticks: int
    """Scheduler ticks run (a measure of the work done)."""
    runs: int
    """Runs started."""
    failed_starts: list[tuple[str, datetime]] = field(default_factory=list)
    """Each run a `Failure` failed: its trigger and its start (elapsed time)."""

    def unmatched(self, failures: Sequence[Failure]) -> list[Failure]:
        """The failures no run started within (a time given in the wrong zone, say)."""
        return [
            failure
            for failure in failures
            if not any(
                trigger_id == failure.trigger_id and failure.start_at <= at <= failure.end_at
                for trigger_id, at in self.failed_starts
            )
        ]
