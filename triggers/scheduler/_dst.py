"""Which occurrences a daylight-saving change moved, merged or repeated, and how.

Private to `triggers.scheduler.occurrences`. The schedule kinds compute their
instants by Debian cron's rule (`_cron`, `_intervals`); this module looks at one
of those instants afterwards and says what the change did to the wall times the
schedule names, so `triggers next` can show it ("02:30 does not exist on
2027-03-28, fires at 03:00"). Instants are epoch seconds, wall times seconds of
the naive local calendar, as in `_zone_offsets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from triggers.scheduler._zone_offsets import Transition, ZoneOffsets, instant

if TYPE_CHECKING:
    from triggers.scheduler._cron import CronRule

ShiftKind = Literal["moved", "merged", "repeated"]
_MAX_WALLS = 4  # wall times of one gap worth naming (`0-59 2 * * *` has 60)
_DAY_S = 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class DstShift:
    """What a daylight-saving change did to one occurrence.

    `moved`: the wall time the schedule names does not exist (a spring-forward gap);
    the occurrence fires at the first instant after the gap. `merged`: several wall
    times became this one occurrence (wall times of one gap, with the wall time
    ending it; or the two instants of a repeated wall time, of which only the first
    fires). `repeated`: the wall time happens twice and fires at both instants (an
    expression with a wildcard minute or hour follows elapsed time); `second` tells
    which one this is.
    """

    kind: ShiftKind
    walls: tuple[datetime, ...]
    """The wall times the schedule names (naive, local), oldest first."""
    more_walls: int
    """How many more wall times the gap held than `walls` lists."""
    local: datetime
    """The occurrence, in the trigger's zone."""
    clock_from: datetime
    """The wall clock just before the change (naive) ..."""
    clock_to: datetime
    """... and the wall time it reads at the change."""
    second: bool = False


def fixed_shift(offsets: ZoneOffsets, wall: int, at_s: int) -> DstShift | None:
    """The shift of an occurrence at `at_s` whose schedule names one wall time, `wall`
    (a calendar schedule, or an `at` given as a wall time)."""
    if at_s + offsets.offset(at_s) != wall:
        gap = _gap_ending_at(offsets, at_s)
        if gap is None:
            return None
        return _shift("moved", offsets, (wall,), 0, at_s, gap)
    repeat = _repeat_of(offsets, at_s)
    if repeat is None:
        return None
    return _shift("merged", offsets, (wall,), 0, at_s, repeat)


def cron_shift(rule: CronRule, offsets: ZoneOffsets, at_s: int) -> DstShift | None:
    """The shift of an occurrence of a cron rule at `at_s`."""
    gap = _gap_ending_at(offsets, at_s) if rule.fixed_time else None
    if gap is not None:
        first_wall, end_wall = gap.at + gap.before, gap.at + gap.after
        skipped = _matches(rule, first_wall, end_wall)
        if skipped:
            listed = skipped[:_MAX_WALLS]
            # The wall time ending the gap is this same instant: it fires with them.
            ends = rule.next(end_wall) == end_wall
            kind: ShiftKind = "moved" if len(skipped) == 1 and not ends else "merged"
            walls = (*listed, end_wall) if ends else tuple(listed)
            return _shift(kind, offsets, walls, len(skipped) - len(listed), at_s, gap)
    repeat = _repeat_of(offsets, at_s)
    if repeat is None:
        return None
    wall = at_s + offsets.offset(at_s)
    if rule.fixed_time:
        return _shift("merged", offsets, (wall,), 0, at_s, repeat)
    return _shift("repeated", offsets, (wall,), 0, at_s, repeat, second=at_s >= repeat.at)


def _matches(rule: CronRule, low: int, high: int) -> list[int]:
    """The rule's wall times in [low, high) (a gap: a few hours at most)."""
    found: list[int] = []
    wall = rule.next(low)
    while wall is not None and wall < high:
        found.append(wall)
        wall = rule.next(wall + 1)
    return found


def _gap_ending_at(offsets: ZoneOffsets, at_s: int) -> Transition | None:
    """The spring-forward change taking effect exactly at `at_s`, if any."""
    found = offsets.previous_transition(at_s)
    if found is None or found.at != at_s or not found.forward:
        return None
    return found


def _repeat_of(offsets: ZoneOffsets, at_s: int) -> Transition | None:
    """The fall-back change that makes the wall time at `at_s` happen twice, if any."""
    before = offsets.previous_transition(at_s)
    if (
        before is not None
        and not before.forward
        and at_s + before.after < before.at + before.before
    ):
        return before  # the second pass over the repeated wall times
    after = offsets.next_transition(at_s, at_s + _DAY_S)
    if after is not None and not after.forward and at_s + after.before >= after.at + after.after:
        return after  # the first pass
    return None


def _shift(
    kind: ShiftKind,
    offsets: ZoneOffsets,
    walls: tuple[int, ...],
    more: int,
    at_s: int,
    transition: Transition,
    *,
    second: bool = False,
) -> DstShift:
    return DstShift(
        kind=kind,
        walls=tuple(_naive(wall) for wall in walls),
        more_walls=more,
        local=instant(at_s).astimezone(offsets.zone),
        clock_from=_naive(transition.at + transition.before),
        clock_to=_naive(transition.at + transition.after),
        second=second,
    )


def _naive(wall: int) -> datetime:
    return instant(wall).replace(tzinfo=None)


def describe_shift(shift: DstShift) -> str:
    """One line for people: `02:30 does not exist on 2027-03-28 (clocks go forward from
    02:00 to 03:00): fires at 03:00`."""
    day = shift.local.date().isoformat()
    way = "back" if shift.clock_to < shift.clock_from else "forward"
    change = f"clocks go {way} from {_clock(shift.clock_from)} to {_clock(shift.clock_to)}"
    at = _clock(shift.local.replace(tzinfo=None))
    offset = shift.local.strftime("%z")
    offset = f"{offset[:3]}:{offset[3:]}"
    if shift.kind == "repeated":
        which = "the second" if shift.second else "the first"
        return (
            f"{_clock(shift.walls[0])} happens twice on {day} ({change}): "
            f"fires at both; this is {which} ({offset})"
        )
    if shift.clock_to < shift.clock_from:  # a repeat, merged into its first instant
        return (
            f"{_clock(shift.walls[0])} happens twice on {day} ({change}): "
            f"fires once, at the first ({offset})"
        )
    skipped = [wall for wall in shift.walls if wall < shift.clock_to]
    names = _names([_clock(wall) for wall in skipped], shift.more_walls)
    verb = "does" if len(skipped) == 1 and not shift.more_walls else "do"
    text = f"{names} {verb} not exist on {day} ({change}): "
    if len(shift.walls) > len(skipped):
        return text + f"fires at {at}, once with the {at} occurrence"
    if shift.kind == "merged":
        return text + f"fires once, at {at}"
    return text + f"fires at {at}"


def _names(items: list[str], more: int) -> str:
    if more:
        return ", ".join(items) + f" and {more} more"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def _clock(wall: datetime) -> str:
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")
