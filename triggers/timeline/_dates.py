"""Instants as matplotlib's date numbers (the picture's x), computed without its cost."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

_DAY = timedelta(days=1)


@functools.cache
def _epoch() -> datetime:
    from matplotlib.dates import get_epoch  # noqa: PLC0415

    return datetime.fromisoformat(get_epoch()).replace(tzinfo=UTC)


def x_of(instant: datetime) -> float:
    """matplotlib's date number of `instant`: days since its epoch (what `date2num`
    computes, without its cost of tens of microseconds an instant)."""
    return (instant - _epoch()) / _DAY
