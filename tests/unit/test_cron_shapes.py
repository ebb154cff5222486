"""Cron expressions that differ only by their `H` draws share one parse.

`H` fields are drawn per trigger by croniter's own expander before the rest of the
expression is parsed (once per shape, cached): what each trigger gets must be what
croniter gives when it parses the whole expression with the trigger's id.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from croniter import croniter

from triggers.scheduler._cron import _unhashed, parse_cron

EXPRESSIONS = [
    "H * * * *",
    "H H * * *",
    "H/15 * * * *",
    "H(0-29)/10 H(8-17) * * *",
    "H H H * *",
    "H H * * H",
    "H H H H *",
    "H H 1-15 * h",
    "H * * * * *",
    "H/5 H * * * *",
    "0 H/7 * * *",
    "h h * * thu",
    "H(0-59)/60 * * * *",
    "30 H * * sun",
]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
IDS = [f"t{n:05d}" for n in range(40)] + ["nightly-backup", "x" * 128]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_h_fields_are_drawn_as_croniter_draws_them(expression: str) -> None:
    fields = expression.lower().split()
    seconds_first = len(fields) == 6
    for trigger_id in IDS:
        whole = croniter(
            expression.lower(),
            EPOCH,
            hash_id=trigger_id,
            second_at_beginning=seconds_first,
        )
        drawn = croniter(
            " ".join(_unhashed(fields, trigger_id)),
            EPOCH,
            second_at_beginning=seconds_first,
        )
        assert drawn.expanded == whole.expanded, trigger_id


def test_triggers_with_one_shape_share_its_parse_and_calendar() -> None:
    first = parse_cron("0 H * * 1-5", trigger_id="a")
    # Both draws land on one minute for some pair of ids: find one.
    twin = next(
        rule
        for rule in (parse_cron("0 H * * 1-5", trigger_id=f"b{n}") for n in range(200))
        if rule._hours == first._hours
    )
    assert twin._days is first._days
    assert twin._hours is first._hours
