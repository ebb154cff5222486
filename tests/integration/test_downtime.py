"""Daemon downtime on a real store: recorded by the scheduler that ends it, and drawn by
`triggers timeline` with the ledger the outage left (catch-up, missed ranges)."""

from __future__ import annotations

from datetime import timedelta

from looms_runtime.db import Database
from tests.factories import spec
from tests.integration.harness import Harness
from tests.svg_picture import ids, parse, shapes
from triggers.clock import utc
from triggers.inspection import timeline_report
from triggers.runner.fake import FakeRunner
from triggers.timeline import render_svg, render_text

T0 = utc(2022, 6, 1)
HOURLY = spec("h", cron="17 * * * *", window=timedelta(hours=1), timezone="Europe/Berlin")
POLL = timedelta(minutes=10)  # the harness's poll interval


def test_a_daemon_started_after_an_outage_records_it_and_the_timeline_draws_it(
    reused_database: Database,
) -> None:
    runner = FakeRunner(auto_complete=True)
    first = Harness(reused_database, start=T0, runner=runner)
    first.apply([HOURLY])
    first.run_until(T0 + timedelta(hours=2))
    first.close()
    stopped_at = T0 + timedelta(hours=2)
    second = Harness(reused_database, start=T0 + timedelta(hours=8), runner=runner, owner="b")
    second.run_until(T0 + timedelta(hours=10))
    second.close()

    [down] = second.store.downtime(since=T0, until=T0 + timedelta(days=1))
    # It ends at the first heartbeat, which waits for the first tick's launches.
    restarted = T0 + timedelta(hours=8)
    assert (down.started_at, down.ended_by) == (stopped_at, "b")
    assert restarted <= down.ended_at <= restarted + timedelta(seconds=1)
    assert second.ledger("h") == [
        "00:17 completed",
        "01:17 completed",
        "02:17 missed/catchup_window x5",
        "07:17 completed",
        "08:17 completed",
        "09:17 completed",
    ]

    now = T0 + timedelta(hours=11)
    report = timeline_report(
        second.store,
        trigger_ids=[],
        since=T0,
        until=T0 + timedelta(hours=12),
        now=now,
        poll_interval=POLL,
        limit=100,
    )
    timeline = report.timeline
    assert report.cut == []
    assert timeline.trigger_ids == ["h"] and timeline.trigger_zones == {"h": "Europe/Berlin"}
    assert [row["occurrence"] for row in timeline.rows][-1] == "2022-06-01T00:17:00.000Z"
    [ongoing] = [d for d in timeline.downtime if d.ongoing]  # no daemon beats now
    assert (ongoing.started_at, ongoing.ended_at) == (T0 + timedelta(hours=10), now)
    assert [u.strftime("%H:%M") for u in timeline.upcoming["h"]] == ["11:17"]

    root = parse(render_svg(timeline))
    drawn = ids(root)
    assert {"downtime-0", "downtime-1", "range-missed-catchup_window-0", "upcoming-0"} <= drawn
    assert shapes(root, "runs-completed-0") == 5
    text = render_text(timeline, width=100)
    assert "daemon down  2022-06-01 02:00 → 2022-06-01 08:00 (6h)" in text
    assert "daemon down  2022-06-01 10:00 → now (1h)" in text


def test_no_downtime_while_a_second_daemon_keeps_ticking(reused_database: Database) -> None:
    runner = FakeRunner(auto_complete=True)
    first = Harness(reused_database, start=T0, runner=runner)
    first.apply([HOURLY])
    first.run_until(T0 + timedelta(hours=3))
    second = Harness(reused_database, start=T0 + timedelta(hours=3), runner=runner, owner="b")
    second.run_until(T0 + timedelta(hours=4))
    first.close()
    second.close()
    assert second.store.downtime(since=T0, until=T0 + timedelta(days=1)) == []
