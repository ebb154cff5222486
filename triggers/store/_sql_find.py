"""The query of `find_triggers`: the dashboard's list page, searched and filtered in SQL.

A search is a substring of the id or the description, case-insensitive (`ILIKE` on
PostgreSQL, `lower(...) LIKE lower(...)` on SQLite, which folds ASCII letters only),
with `%`, `_` and the escape character escaped, so each matches itself. No index
serves a substring: the database scans the trigger rows (10,000 in a few
milliseconds), and only the page's rows reach Python.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from triggers.model import Outcome
from triggers.store._sql_common import select_triggers
from triggers.store.protocol import ListedState, TriggerListQuery
from triggers.store.schema import fires, triggers

_ESCAPE = "\\"


def like_pattern(search: str) -> str:
    """`search` as a LIKE pattern matching it anywhere, its wildcards taken literally."""
    escaped = search.replace(_ESCAPE, _ESCAPE * 2).replace("%", r"\%").replace("_", r"\_")
    return f"%{escaped}%"


def find_statement(query: TriggerListQuery) -> sa.Select[Any]:
    """The page's trigger rows (`select_triggers`' columns), by id."""
    statement = select_triggers().where(*_STATES[query.state])
    if query.after_id is not None:
        statement = statement.where(triggers.c.id > query.after_id)
    if query.search:
        pattern = like_pattern(query.search)
        described = triggers.c.declaration["description"].as_string()
        statement = statement.where(
            sa.or_(
                triggers.c.id.ilike(pattern, escape=_ESCAPE),
                described.ilike(pattern, escape=_ESCAPE),
            )
        )
    if query.state == "failing":
        statement = statement.where(*_FAILING)
    elif query.state == "running":
        statement = statement.where(triggers.c.id.in_(_WITH_LAUNCHED))
    return statement.order_by(triggers.c.id).limit(query.limit)


_LIVE = sa.not_(triggers.c.retired)
_ENABLED = (_LIVE, triggers.c.enabled)
_UNPAUSED = (*_ENABLED, sa.not_(triggers.c.paused))
_STATES: dict[ListedState, tuple[sa.ColumnElement[bool], ...]] = {
    "all": (_LIVE,),
    "failing": (_LIVE,),
    "running": (_LIVE,),
    "retired": (triggers.c.retired,),
    "disabled": (_LIVE, sa.not_(triggers.c.enabled)),
    "paused": (*_ENABLED, triggers.c.paused),
    "blocked": (*_UNPAUSED, triggers.c.blocked_by.is_not(None)),
    "enabled": (*_UNPAUSED, triggers.c.blocked_by.is_(None)),
}
"""What each state is, in the columns that say it (`trigger_state`'s order: retired,
then disabled, then paused, then blocked)."""

_WITH_LAUNCHED = sa.select(fires.c.trigger_id).where(fires.c.outcome == Outcome.LAUNCHED.value)
"""The triggers with a run in flight (off the outcome index: a few rows)."""

_NEWEST_OUTCOME = (
    sa.select(fires.c.outcome)
    .where(fires.c.trigger_id == triggers.c.id)
    .order_by(fires.c.occurrence_at.desc(), fires.c.id.desc())
    .limit(1)
    .correlate(triggers)
    .scalar_subquery()
)
_FAILING = (
    # Only triggers the outcome index names as ever failing; then, for each of them,
    # one step down its (trigger_id, occurrence_at) index for its newest row.
    triggers.c.id.in_(sa.select(fires.c.trigger_id).where(fires.c.outcome == Outcome.FAILED.value)),
    sa.literal(Outcome.FAILED.value) == _NEWEST_OUTCOME,
)
