"""What a run waits for, in the same words wherever it is shown (`runs show`, `runs
list`, `list`, `status`, the API), and whether a signal is one it can take.

A run in a `wait_signal` step is not stuck: it waits for someone to send the signal,
and every view says which signal, until when, and the command that sends it. A
signal that no step of the run waits for, now or later in its flow as declared, or
one sent to a settled run, would change nothing: it is refused, naming what the run
waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from triggers.clock import iso
from triggers.errors import SignalRefusedError

Show = Callable[[datetime], str | None]

DECISIONS = {
    "retry": "run the step again: its first attempt may have done part of its work, or all",
    "cancel": "cancel the run: the step is not run again, and the trigger launches again",
}
"""What each decision on a parked run means (`runs show` and the dashboard say it)."""


def decision_lines(run_id: str, effects: Iterable[Any]) -> list[str]:
    """The two commands that decide a parked run, each with what it means."""
    lines = []
    for effect in effects:
        if effect.status in ("ambiguous", "timed_out"):
            retry = f"triggers runs retry {run_id} {effect.effect_id}"
            lines.append(f"{retry}: {DECISIONS['retry']}")
    if lines:
        lines.append(f"triggers runs cancel {run_id}: {DECISIONS['cancel']}")
    return lines


WAITS_READ = 200
"""Unsettled runs whose waits a listing reads at most (each is one fold of its log)."""


def waiting_text(run_id: str, wait: Any, *, show: Show = iso) -> str:
    """One wait in words: `waiting for signal 'approved' until ...: triggers runs signal
    RUN approved`, or `sleeping until ... (step nap)`."""
    until = f" until {show(wait.until)}" if wait.until is not None else ""
    if wait.kind == "signal":
        return (
            f"waiting for signal {wait.signal!r}{until}: "
            f"triggers runs signal {run_id} {wait.signal}"
        )
    return f"sleeping{until} (step {wait.wait_id})"


def wait_json(run_id: str, wait: Any) -> dict[str, Any]:
    """A wait, as the `waiting` lists of `runs show --json`, `runs list --json` and
    `status --json` give it."""
    return {
        "wait_id": wait.wait_id,
        "kind": wait.kind,
        "signal": wait.signal,
        "until": iso(wait.until) if wait.until is not None else None,
        "text": waiting_text(run_id, wait),
        "command": f"triggers runs signal {run_id} {wait.signal}"
        if wait.kind == "signal"
        else None,
    }


def open_waits(
    runs: Any, run_ids: Iterable[str], *, prepare: Callable[[], None] | None = None
) -> dict[str, tuple[Any, ...]]:
    """The open waits of each run (at most `WAITS_READ` runs are read; the others, and
    runs gone meanwhile, answer none). `prepare` is called once before the first run is
    read (a CLI sends the fold's logging to stderr then, and pays for it only then)."""
    from looms_runtime.errors import LoomsError  # noqa: PLC0415

    found: dict[str, tuple[Any, ...]] = {}
    chosen = list(dict.fromkeys(run_ids))[:WAITS_READ]
    if chosen and prepare is not None:
        prepare()
    for run_id in chosen:
        try:
            waits = tuple(runs.inspect_run(run_id).waits)
        except LoomsError:  # purged, or unreadable: the run's own view says why
            continue
        if waits:
            found[run_id] = waits
    return found


def waits_by_run(
    runs: Any, summaries: Sequence[Any], *, prepare: Callable[[], None] | None = None
) -> Mapping[str, tuple[Any, ...]]:
    """The open waits of the unsettled runs among `summaries` (a listing's rows)."""
    active = [row.run_id for row in summaries if row.state == "active"]
    return open_waits(runs, active, prepare=prepare)


def waiting_runs(
    runs: Any, *, prepare: Callable[[], None] | None = None
) -> list[tuple[Any, tuple[Any, ...]]]:
    """The unsettled runs (not parked) that wait now, newest first, with their waits."""
    listed = runs.list_runs(status="active", limit=WAITS_READ)
    active = [row for row in listed if row.state == "active"]
    waits = open_waits(runs, [row.run_id for row in active], prepare=prepare)
    return [(row, waits[row.run_id]) for row in active if row.run_id in waits]


def check_signal(
    info: Any, name: str, *, key: str | None = None, events: Callable[[], Iterable[Any]]
) -> None:
    """Refuse a signal the run can never take; a repeat of one its wait took already
    (the same idempotency `key`) passes, so that a retried request answers as the first.

    Raises:
        SignalRefusedError: the run is settled, or neither its open waits nor the steps
            still to come in its flow wait for `name`.
    """
    run_id = info.run_id
    awaited = info.awaited_signals
    if info.status == "active" and (awaited is None or name in awaited):
        return
    if key is not None and _taken(events(), name, f"signal:{key}"):
        return
    if info.status != "active":
        raise SignalRefusedError(
            f"run {run_id} is {info.status}: it waits for no signal any more",
            run_id=run_id,
            signal=name,
            status=info.status,
        )
    awaited = awaited or ()
    waits = [waiting_text(run_id, w) for w in info.waits]
    if waits:
        what = "; ".join(waits)
    elif awaited:
        what = "its flow waits later for " + ", ".join(repr(s) for s in awaited)
    else:
        what = "no step of its flow waits for a signal"
    raise SignalRefusedError(
        f"run {run_id} does not wait for signal {name!r}: {what}",
        run_id=run_id,
        signal=name,
        awaited=list(awaited),
    )


def _taken(events: Iterable[Any], name: str, key: str) -> bool:
    """Whether a wait of the run ended on signal `name` delivered under `key`."""
    started: dict[str, Any] = {}
    for event in events:
        payload = event.payload
        if event.type == "wait_started":
            started[str(payload.get("wait_id"))] = payload.get("signal")
        elif event.type == "wait_finished" and payload.get("key") == key:
            return bool(started.get(str(payload.get("wait_id"))) == name)
    return False
