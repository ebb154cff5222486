"""`triggers simulate`'s options, read into a scenario.

Forms (each option but `--from`/`--to` repeatable):

- `--duration ID=D` how long ID's runs last; `--duration D` the others' (default 0s);
- `--down T1..T2` no daemon runs from T1 until T2;
- `--pause ID@T1..T2` ID paused at T1, resumed at T2; `--pause ID@T1..` to the end;
- `--jump T=+D` / `T=-D` the daemon's clock steps forwards / back by D at T;
- `--edit T=FILE` FILE's declarations applied at T (as `triggers apply FILE`);
- `--fail ID@T` the run of ID that starts at T fails; `--fail ID@T1..T2` every run of
  ID that starts from T1 to T2 (both included).

`--from` is a time as everywhere (`2027-03-27`, `yesterday`...). `--to` and the
instants of the events take the same forms, and a relative one counts from
`--from`: `--to +3d`, `--down +1d2h..+1d5h`, `--pause backup@+12h..+1d`. A time
without an offset is UTC unless `--local` is given. Durations are those of the
declarations (`90s`, `70m`, `1h30m`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from triggers.cli._app import options
from triggers.cli._common import clock
from triggers.durations import parse_duration
from triggers.errors import InputError, InvalidTimeError
from triggers.times import parse_time

if TYPE_CHECKING:
    from triggers.simulation import Scenario


def duration_option(text: str) -> tuple[str | None, timedelta]:
    """`ID=D` as (ID, D); `D` alone as (None, D), the default duration.

    Raises:
        InputError: no duration after `=`, an empty id, or not a duration.
    """
    trigger_id, equals, value = text.rpartition("=")
    if equals and not trigger_id.strip():
        raise InputError(f"--duration {text!r}: give ID=DURATION (like backup=70m) or DURATION")
    return (trigger_id.strip() or None), _duration(value, option=f"--duration {text!r}", zero=True)


def span_option(
    text: str, *, option: str, start: datetime, local: bool = False, open_end: bool = False
) -> tuple[datetime, datetime | None]:
    """`T1..T2` as two instants (`T1..` with `open_end`: the second is None).

    Raises:
        InputError: no `..`, a missing or unparseable time, or T2 not after T1.
    """
    first, dots, last = text.partition("..")
    if not dots or not first.strip() or (not last.strip() and not open_end):
        shape = "T1..T2 or T1.." if open_end else "T1..T2"
        raise InputError(f"{option} {text!r}: expected {shape} (two times joined by '..')")
    start_at = instant_option(first, option=option, start=start, local=local)
    if not last.strip():
        return start_at, None
    end_at = instant_option(last, option=option, start=start, local=local)
    if end_at <= start_at:
        raise InputError(f"{option} {text!r}: it ends before it starts")
    return start_at, end_at


def pause_option(
    text: str, *, start: datetime, local: bool = False
) -> tuple[str, datetime, datetime | None]:
    """`ID@T1..T2` (or `ID@T1..`) as (ID, pause at, resume at or None)."""
    trigger_id, at, span = text.partition("@")
    if not at or not trigger_id.strip():
        raise InputError(f"--pause {text!r}: expected ID@T1..T2 (or ID@T1.. to the end)")
    first, last = span_option(span, option="--pause", start=start, local=local, open_end=True)
    return trigger_id.strip(), first, last


def fail_option(
    text: str, *, start: datetime, local: bool = False
) -> tuple[str, datetime, datetime]:
    """`ID@T` or `ID@T1..T2` as (ID, first start, last start)."""
    trigger_id, at, when = text.partition("@")
    if not at or not trigger_id.strip() or not when.strip():
        raise InputError(f"--fail {text!r}: expected ID@T or ID@T1..T2 (like backup@+1d2h)")
    option = f"--fail {text!r}"
    first, dots, last = when.partition("..")
    if dots and not (first.strip() and last.strip()):
        raise InputError(f"{option}: expected ID@T or ID@T1..T2 (two times joined by '..')")
    start_at = instant_option(first, option=option, start=start, local=local)
    end_at = instant_option(last, option=option, start=start, local=local) if dots else start_at
    if end_at < start_at:
        raise InputError(f"{option}: it ends before it starts")
    return trigger_id.strip(), start_at, end_at


def jump_option(text: str, *, start: datetime, local: bool = False) -> tuple[datetime, timedelta]:
    """`T=+D` (forwards) or `T=-D` (back) as (T, the signed step)."""
    when, equals, step = text.rpartition("=")
    if not equals or not when.strip():
        raise InputError(f"--jump {text!r}: expected T=+DURATION or T=-DURATION (like +1d=+2h)")
    sign = -1 if step.strip().startswith("-") else 1
    by = _duration(step.strip().lstrip("+-"), option=f"--jump {text!r}")
    return instant_option(when, option="--jump", start=start, local=local), sign * by


def edit_option(text: str, *, start: datetime, local: bool = False) -> tuple[datetime, Path]:
    """`T=FILE` as (T, FILE)."""
    when, equals, file = text.partition("=")
    if not equals or not when.strip() or not file.strip():
        raise InputError(f"--edit {text!r}: expected T=FILE (like +2d=triggers-v2.yaml)")
    return instant_option(when, option="--edit", start=start, local=local), Path(file.strip())


def instant_option(text: str, *, option: str, start: datetime, local: bool = False) -> datetime:
    """A time of `option`: a relative one counts from `start` (`--from`, or now for
    `--from` itself)."""
    try:
        return parse_time(text.strip(), now=start, local=local)
    except InvalidTimeError as exc:
        raise InputError(f"{option}: {exc}") from exc


def _duration(text: str, *, option: str, zero: bool = False) -> timedelta:
    try:
        return parse_duration(text.strip(), allow_zero=zero)
    except ValueError as exc:
        raise InputError(f"{option}: {exc}") from exc


def read_scenario(
    path: Path,
    *,
    start: str,
    end: str,
    durations: list[str],
    downs: list[str],
    pauses: list[str],
    jumps: list[str],
    edits: list[str],
    failures: Sequence[str] = (),
) -> Scenario:
    """The scenario `simulate`'s options describe (their forms: above).

    Raises:
        InputError: a missing `--from`/`--to` or an option that does not parse.
        DeclarationError: FILE, or a file of `--edit`, fails validation.
    """
    # The simulation and the declarations' models load only for a command that uses them.
    from triggers import simulation  # noqa: PLC0415
    from triggers.declarations import load_declarations  # noqa: PLC0415

    if not start or not end:
        raise InputError("simulate needs --from T and --to T (the range to simulate)")
    local = options.local
    start_at = instant_option(start, option="--from", start=clock.now(), local=local)
    end_at = instant_option(end, option="--to", start=start_at, local=local)
    default, by_id = simulation.DEFAULT_DURATION, {}
    for text in durations:
        trigger_id, value = duration_option(text)
        if trigger_id is None:
            default = value
        else:
            by_id[trigger_id] = value
    spans = [span_option(t, option="--down", start=start_at, local=local) for t in downs]
    paused = [pause_option(text, start=start_at, local=local) for text in pauses]
    steps = [jump_option(text, start=start_at, local=local) for text in jumps]
    failed = [fail_option(text, start=start_at, local=local) for text in failures]
    applied = []
    for text in edits:
        at, edit_file = edit_option(text, start=start_at, local=local)
        found = load_declarations(edit_file)
        applied.append(simulation.Edit(at=at, specs=found.triggers, source=str(edit_file)))
    return simulation.Scenario(
        specs=load_declarations(path).triggers,
        start_at=start_at,
        end_at=end_at,
        durations=by_id,
        default_duration=default,
        downtimes=[simulation.Downtime(start_at=a, end_at=b) for a, b in spans if b is not None],
        pauses=[simulation.Pause(trigger_id=i, start_at=a, end_at=b) for i, a, b in paused],
        jumps=[simulation.ClockJump(at=at, by=by) for at, by in steps],
        edits=applied,
        failures=[simulation.Failure(trigger_id=i, start_at=a, end_at=b) for i, a, b in failed],
    )
