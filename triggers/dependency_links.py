"""The edges of the dependency graph one trigger takes part in, as `describe` shows
them: its upstreams (what its `after:` follows, what its `requires:` waits for)
and its dependents (the triggers whose `after:` or `requires:` name it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from triggers.durations import format_duration
from triggers.model import AfterSchedule, Trigger, TriggerSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyLink:
    """One edge, seen from the trigger described: the trigger at its other end."""

    trigger_id: str
    via: Literal["after", "requires"]
    outcome: str
    join: Literal["one", "all", "any"] | None = None
    """`after:`'s form; None for `requires:`."""
    within: timedelta | None = None
    """`after: {all: ...}`'s window, or `requires:`'s `since`."""

    def to_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger_id,
            "via": self.via,
            "outcome": self.outcome,
            "join": self.join,
            "within_s": None if self.within is None else self.within.total_seconds(),
        }

    def text(self) -> str:
        """`orders completed (after all, within 6h)`."""
        form = self.via if self.join in (None, "one") else f"{self.via} {self.join}"
        within = f", within {format_duration(self.within)}" if self.within else ""
        return f"{self.trigger_id} {self.outcome} ({form}{within})"


def upstream_links(spec: TriggerSpec) -> list[DependencyLink]:
    """The triggers `spec` follows (`after:`) or waits for (`requires:`)."""
    links: list[DependencyLink] = []
    schedule = spec.schedule
    if isinstance(schedule, AfterSchedule):
        links.extend(
            DependencyLink(
                trigger_id=upstream.trigger,
                via="after",
                outcome=upstream.outcome,
                join=schedule.join,
                within=schedule.within,
            )
            for upstream in schedule.upstreams
        )
    if spec.requires is not None:
        required = spec.requires
        links.append(
            DependencyLink(
                trigger_id=required.trigger,
                via="requires",
                outcome=required.outcome,
                within=required.since,
            )
        )
    return links


def dependent_links(trigger_id: str, triggers: Iterable[Trigger]) -> list[DependencyLink]:
    """The live triggers whose `after:` or `requires:` names `trigger_id`, by id, each
    with what it waits for."""
    links: list[DependencyLink] = []
    for other in sorted(triggers, key=lambda t: t.id):
        if other.retired or other.id == trigger_id:
            continue
        links.extend(
            dataclasses.replace(link, trigger_id=other.id)
            for link in upstream_links(other.spec)
            if link.trigger_id == trigger_id
        )
    return links
