"""The `after:` of dependent triggers: each names a declared trigger, and none forms a cycle.

Checked over the raw items of `triggers:` (a trigger invalid for another reason still
counts as declared), with the file position of each problem.
"""

from __future__ import annotations

from collections.abc import Sequence

from triggers.declarations._messages import suggestion
from triggers.declarations._needs import find_cycle
from triggers.declarations._problems import Problems
from triggers.declarations._yaml import Loc


def check_dependencies(raw_triggers: Sequence[object], problems: Problems) -> None:
    """Report an upstream (`after.trigger`, or an item of `after.all` / `after.any`)
    that names no trigger of the file, or the trigger itself, and a cycle of
    dependencies (`a` after `b` after `a`, through any form), at the upstream's line."""
    ids = [
        raw["id"]
        for raw in raw_triggers
        if isinstance(raw, dict) and isinstance(raw.get("id"), str)
    ]
    edges: dict[str, list[str]] = {}
    places: dict[tuple[str, str], Loc] = {}
    for index, raw in enumerate(raw_triggers):
        if not isinstance(raw, dict):
            continue
        own = raw.get("id")
        for upstream, where in _upstreams(raw.get("after"), index):
            if upstream == own:
                problems.add(where, f"trigger '{own}' cannot run after itself")
            elif upstream not in ids:
                others = [other for other in ids if other != own]
                hint = suggestion(upstream, others) or (
                    f" (declared: {', '.join(others)})" if others else ""
                )
                problems.add(where, f"unknown upstream trigger '{upstream}'{hint}")
            elif isinstance(own, str):
                edges.setdefault(own, []).append(upstream)
                places.setdefault((own, upstream), where)
    for index, raw in enumerate(raw_triggers):
        if not isinstance(raw, dict):
            continue
        requires = raw.get("requires")
        if isinstance(requires, dict) and isinstance(requires.get("trigger"), str):
            _check_required(requires["trigger"], raw.get("id"), ids, index, problems)
    cycle = find_cycle(edges)
    if cycle:
        message = f"the dependencies form a cycle: {' after '.join(cycle)}"
        problems.add(places[cycle[0], cycle[1]], message)


def _upstreams(after: object, index: int) -> list[tuple[str, Loc]]:
    """The upstream triggers an `after:` names, each with its place: `trigger`, or each
    item of `all` / `any` (malformed ones are reported by the model)."""
    if not isinstance(after, dict):
        return []
    if isinstance(after.get("trigger"), str):
        return [(after["trigger"], ("triggers", index, "after", "trigger"))]
    found: list[tuple[str, Loc]] = []
    for join in ("all", "any"):
        listed = after.get(join)
        if not isinstance(listed, list):
            continue
        for position, item in enumerate(listed):
            if isinstance(item, dict) and isinstance(item.get("trigger"), str):
                found.append(
                    (item["trigger"], ("triggers", index, "after", join, position, "trigger"))
                )
    return found


def _check_required(
    required: str, own: object, ids: Sequence[str], index: int, problems: Problems
) -> None:
    where: Loc = ("triggers", index, "requires", "trigger")
    if required == own:
        problems.add(where, f"trigger '{own}' cannot require itself")
    elif required not in ids:
        others = [other for other in ids if other != own]
        hint = suggestion(required, others) or (
            f" (declared: {', '.join(others)})" if others else ""
        )
        problems.add(where, f"unknown required trigger '{required}'{hint}")
