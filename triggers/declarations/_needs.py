"""The `needs` of a flow's steps: each names a step of the same flow, and none forms a cycle.

Checked here, with the file position of each problem, so that `validate` reports
them like every other mistake; the runtime checks the same again when the flow is
registered.
"""

from __future__ import annotations

from collections.abc import Sequence

from triggers.declarations._messages import suggestion
from triggers.declarations._problems import Problems
from triggers.declarations._yaml import Loc
from triggers.model import JsonValue


def check_needs(steps: Sequence[dict[str, JsonValue] | None], loc: Loc, problems: Problems) -> None:
    """Report unknown, self-naming and cyclic `needs` of the steps at `loc`."""
    ids = [str(step["id"]) for step in steps if step is not None]
    edges: dict[str, list[str]] = {}
    for index, step in enumerate(steps):
        if step is None:
            continue
        needs = step.get("needs")
        own = str(step["id"])
        if not isinstance(needs, list):
            edges[own] = [ids[index - 1]] if index and len(ids) == len(steps) else []
            continue
        edges[own] = []
        for position, name in enumerate(needs):
            where = (*loc, index, "needs", position)
            if name == own:
                problems.add(where, "a step cannot need itself")
            elif name not in ids:
                hint = suggestion(str(name), [other for other in ids if other != own])
                problems.add(where, f"no step {name!r} in this flow" + hint)
            else:
                edges[own].append(str(name))
    cycle = find_cycle(edges)
    if cycle:
        index = ids.index(cycle[0])
        problems.add((*loc, index, "needs"), f"the needs form a cycle: {' -> '.join(cycle)}")


def find_cycle(edges: dict[str, list[str]]) -> list[str]:
    """A cycle of `edges` (step -> the steps it needs) as a path, or [] when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        path.append(node)
        for needed in edges.get(node, ()):
            if needed in path:
                return [*path[path.index(needed) :], needed]
            if needed not in done:
                found = visit(needed)
                if found:
                    return found
        path.pop()
        done.add(node)
        return []

    for node in edges:
        if node not in done:
            found = visit(node)
            if found:
                return found
    return []
