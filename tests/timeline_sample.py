"""A known ledger to draw: four triggers over three and a half days, across the
spring DST change of Europe/Berlin, with two outages of the daemon close together,
a backfill, a dependent trigger (retired for a day) and a run waiting for a signal.

The unit tests render it and check the picture; docs/timeline.svg is drawn from it:

    .venv/bin/python -m tests.timeline_sample docs/timeline.svg
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from triggers.clock import iso, utc
from triggers.timeline import Branch, Downtime, LifeMark, Timeline, render_file

SINCE = utc(2026, 3, 27)
UNTIL = utc(2026, 3, 30, 12)
NOW = utc(2026, 3, 30, 8, 25)
DOWN = (utc(2026, 3, 28, 13, 40), utc(2026, 3, 28, 18, 20))
"""The daemon was down: the hourly heartbeat missed 14:00 to 16:00 (catch-up `latest`
ran the newest, 18:00, at 18:20; 17:00 was backfilled the next morning)."""
DOWN_AGAIN = (utc(2026, 3, 28, 19, 10), utc(2026, 3, 28, 19, 25))
"""It went down again, briefly, an hour later."""
BACKFILLED_AT = utc(2026, 3, 29, 9, 30)
RETIRED = (utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))
"""`backup-verify` was left out of the declarations for a day, then declared again."""


def row(
    trigger_id: str,
    occurrence: datetime,
    outcome: str,
    *,
    run: timedelta | None = None,
    delay: timedelta = timedelta(seconds=1),
    reason: str | None = None,
    last: datetime | None = None,
    count: int = 1,
    manual_key: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """A ledger row as `history --json` prints it."""
    launched = occurrence + delay if run is not None else None
    settled = None
    if launched is not None and run is not None and outcome != "launched":
        settled = launched + run
    elif run is None:
        settled = occurrence
    return {
        "trigger_id": trigger_id,
        "occurrence": iso(occurrence),
        "outcome": outcome,
        "reason": reason,
        "run_id": f"run-{trigger_id}-{occurrence:%d%H%M}" if launched else None,
        "claimed_at": iso(occurrence),
        "launched_at": iso(launched) if launched else None,
        "settled_at": iso(settled) if settled else None,
        "error": error,
        "last_occurrence": iso(last) if last else None,
        "count": count,
        "revision": 1,
        "host": "db1",
        "manual_key": manual_key,
        "idempotency_key": f"{trigger_id}:{iso(occurrence)}",
        "blocked_by": None,
    }


def _backup() -> list[dict[str, Any]]:
    hour = timedelta(hours=1)
    return [
        row("nightly-backup", utc(2026, 3, 27, 1, 30), "completed", run=70 * timedelta(minutes=1)),
        row(
            "nightly-backup",
            utc(2026, 3, 28, 1, 30),
            "failed",
            run=timedelta(minutes=22),
            error="step 'dump' failed: pg_dump: connection refused",
        ),
        row(
            "nightly-backup",
            utc(2026, 3, 28, 9, 12),
            "completed",
            run=hour,
            manual_key="after-fix",
        ),
        # Fired twice more within the minute: skipped, the first was still running.
        *(
            row(
                "nightly-backup",
                utc(2026, 3, 28, 9, 12, seconds),
                "skipped",
                reason="overlap",
                manual_key=f"after-fix-{seconds}",
            )
            for seconds in (20, 45)
        ),
        # 02:30 does not exist in Berlin on March 29: it fires at 03:00 CEST, 01:00 UTC.
        row("nightly-backup", utc(2026, 3, 29, 1), "completed", run=75 * timedelta(minutes=1)),
        row("nightly-backup", utc(2026, 3, 30, 0, 30), "completed", run=hour),
    ]


def _heartbeat() -> list[dict[str, Any]]:
    rows = []
    at = SINCE
    while at <= NOW:
        if DOWN[0] <= at < DOWN[1]:
            rows.append(
                row(
                    "heartbeat",
                    at,
                    "missed",
                    reason="catchup_policy",
                    last=at + timedelta(hours=2),
                    count=3,
                )
            )
            backfilled = at + timedelta(hours=3)
            rows.append(
                row(
                    "heartbeat",
                    backfilled,
                    "completed",
                    run=timedelta(seconds=40),
                    delay=BACKFILLED_AT - backfilled,
                )
            )
            rows.append(
                row(
                    "heartbeat",
                    at + timedelta(hours=4),
                    "completed",
                    run=timedelta(seconds=40),
                    delay=timedelta(minutes=20),
                )
            )
            at += timedelta(hours=5)
            continue
        if utc(2026, 3, 29, 20) <= at <= utc(2026, 3, 30, 6):
            rows.append(
                row("heartbeat", at, "skipped", reason="paused", last=utc(2026, 3, 30, 6), count=11)
            )
            at = utc(2026, 3, 30, 7)
            continue
        rows.append(row("heartbeat", at, "completed", run=timedelta(seconds=40)))
        at += timedelta(hours=1)
    return rows


def _report() -> list[dict[str, Any]]:
    """Every 30 minutes, `overlap: skip`; a run takes 40 minutes, so every other one is
    skipped; one run failed, one was cancelled, the last one is still running."""
    rows = []
    at = SINCE + timedelta(minutes=5)
    index = 0
    while at <= NOW:
        if DOWN[0] <= at < DOWN[1]:
            pass  # the catch-up (policy `latest`) of the outage is the one at 18:05
        elif index % 2:
            rows.append(row("report", at, "skipped", reason="overlap"))
        elif index == 40:
            rows.append(row("report", at, "failed", run=timedelta(minutes=12), error="exit 1"))
        elif index == 96:
            rows.append(row("report", at, "cancelled", run=timedelta(minutes=25)))
        elif NOW - at < timedelta(minutes=40):
            rows.append(row("report", at, "launched", run=timedelta(minutes=40)))
        else:
            rows.append(row("report", at, "completed", run=timedelta(minutes=40)))
        at += timedelta(minutes=30)
        index += 1
    return rows


def _verify() -> list[dict[str, Any]]:
    """After each completed backup, not while retired; the last waits for a signal."""
    rows = []
    for backup in _backup():
        ended = backup["settled_at"]
        if backup["outcome"] != "completed" or RETIRED[0] <= _at(ended) < RETIRED[1]:
            continue
        waits = _at(ended) > NOW - timedelta(hours=8)
        found = row(
            "backup-verify",
            _at(ended),
            "launched" if waits else "completed",
            run=timedelta(hours=9) if waits else timedelta(minutes=12),
            manual_key=f"after:{backup['run_id']}",
        )
        found["upstream_run_id"] = backup["run_id"]
        rows.append(found)
    return rows


def _verify_steps() -> dict[str, list[Branch]]:
    """The last verification checked for ten minutes, then waits for `approved`."""
    [last] = [r for r in _verify() if r["outcome"] == "launched"]
    start = _at(last["launched_at"])
    checked = start + timedelta(minutes=10)
    return {
        last["run_id"]: [
            Branch(step="check", state="succeeded", started_at=start, ended_at=checked),
            Branch(step="approve", state="waiting", started_at=checked),
        ]
    }


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _upcoming() -> dict[str, list[datetime]]:
    def every(start: datetime, step: timedelta) -> list[datetime]:
        found = []
        while start <= UNTIL:
            found.append(start)
            start += step
        return found

    return {
        "heartbeat": every(utc(2026, 3, 30, 9), timedelta(hours=1)),
        "report": every(utc(2026, 3, 30, 8, 35), timedelta(minutes=30)),
        "nightly-backup": [],
    }


def sample_rows() -> list[dict[str, Any]]:
    return _backup() + _heartbeat() + _report() + _verify()


def sample_timeline() -> Timeline:
    """The known ledger as a timeline, in UTC."""
    return Timeline(
        since=SINCE,
        until=UNTIL,
        now=NOW,
        rows=sample_rows(),
        downtime=[
            Downtime(started_at=DOWN[0], ended_at=DOWN[1]),
            Downtime(started_at=DOWN_AGAIN[0], ended_at=DOWN_AGAIN[1]),
        ],
        upcoming=_upcoming(),
        trigger_ids=["nightly-backup", "backup-verify", "heartbeat", "report"],
        trigger_zones={
            "nightly-backup": "Europe/Berlin",
            "backup-verify": "UTC",
            "heartbeat": "UTC",
            "report": "America/New_York",
        },
        branches=_verify_steps(),
        lifecycle={
            "backup-verify": [
                LifeMark(event="created", at=utc(2026, 3, 1)),
                LifeMark(event="retired", at=RETIRED[0]),
                LifeMark(event="revived", at=RETIRED[1]),
            ]
        },
    )


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/timeline.svg")
    written = render_file(sample_timeline(), target)
    sys.stdout.write(f"{target}: {written} bytes\n")
