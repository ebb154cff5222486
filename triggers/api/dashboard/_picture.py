"""A trigger's timeline, from the report `triggers timeline` draws (its lanes, as
`triggers.timeline` sorts them), written as SVG markup directly (`render_web_svg`, no
matplotlib), each run's bar linked to the run's page with a tooltip.

A picture is kept for the minute it was drawn in, as long as the trigger's ledger has
not changed (its newest row, its revision): a page refreshed every few seconds reads
the trigger's ledger for it once a minute at most.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import replace
from datetime import timedelta

from triggers.api._context import ApiServices
from triggers.inspection import timeline_report
from triggers.store.protocol import HistoryQuery
from triggers.timeline import render_web_svg

SPANS = {
    "6h": timedelta(hours=6),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
"""The windows a trigger's page offers (back from now; a quarter as much ahead)."""
ROWS = 2000
"""Ledger rows drawn at most (the newest)."""
_KEPT = 64
_lock = threading.Lock()
_pictures: OrderedDict[tuple[object, ...], str] = OrderedDict()


def timeline_svg(ctx: ApiServices, trigger_id: str, span: str) -> str:
    """The trigger's timeline over `span` (a key of `SPANS`) as inline SVG markup."""
    now = ctx.clock.now()
    window = SPANS[span]
    trigger = ctx.store.get_trigger(trigger_id)
    newest = ctx.store.history(HistoryQuery(trigger_id=trigger_id, limit=1))
    key = (
        trigger_id,
        span,
        trigger.revision if trigger else None,
        trigger.paused if trigger else None,
        trigger.retired if trigger else None,  # drawn from the audit log, not the ledger
        # As JSON text: a row's values include lists (`upstream_run_ids`).
        json.dumps(newest[0].to_json(), sort_keys=True) if newest else None,
        now.replace(second=0, microsecond=0),
    )
    with _lock:
        kept = _pictures.get(key)
        if kept is not None:
            _pictures.move_to_end(key)
            return kept
    report = timeline_report(
        ctx.store,
        trigger_ids=[trigger_id],
        since=now - window,
        until=now + window / 4,
        now=now,
        poll_interval=ctx.poll_interval,
        limit=ROWS,
        audit=ctx.audit,
    )
    picture = replace(report.timeline, run_links="/runs/{run_id}", title=trigger_id)
    svg = render_web_svg(picture)
    with _lock:
        _pictures[key] = svg
        while len(_pictures) > _KEPT:
            _pictures.popitem(last=False)
    return svg
