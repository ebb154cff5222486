"""The arguments of operations as operators write them, read once for the CLI and the API.

An option of the CLI and the query parameter of the HTTP API with the same name
mean the same and are refused with the same message: `--outcome failed` and
`?outcome=failed`, `--since "2h ago"` and `?since=2h%20ago`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from triggers.errors import InputError
from triggers.model import Outcome, Overlap
from triggers.store.audit_log import ActionKind, AuditQuery
from triggers.store.protocol import HistoryQuery
from triggers.times import parse_time


def parse_outcome(text: str) -> Outcome:
    """A ledger outcome by name. Raises InputError naming the known ones."""
    try:
        return Outcome(text)
    except ValueError:
        raise InputError(
            f"unknown outcome {text!r}; one of: {', '.join(o.value for o in Outcome)}"
        ) from None


def parse_overlap(text: str | None) -> Overlap | None:
    """An overlap policy by name (None: the trigger's own). Raises InputError."""
    if text is None:
        return None
    try:
        return Overlap(text)
    except ValueError:
        raise InputError(
            f"unknown overlap {text!r}; one of: {', '.join(o.value for o in Overlap)}"
        ) from None


def parse_action(text: str) -> ActionKind:
    """An audit log action by name. Raises InputError naming the known ones."""
    try:
        return ActionKind(text)
    except ValueError:
        raise InputError(
            f"unknown action {text!r}; one of: {', '.join(a.value for a in ActionKind)}"
        ) from None


def instant(text: str | None, *, now: datetime, local: bool = False) -> datetime | None:
    """The instant a time argument names (None when not given). Raises InvalidTimeError."""
    return None if text is None else parse_time(text, now=now, local=local)


def history_query(
    *,
    trigger_id: str | None,
    outcomes: Iterable[str],
    since: str | None,
    until: str | None,
    limit: int,
    now: datetime,
    local: bool = False,
) -> HistoryQuery:
    """`history`'s filters. Raises InputError (an unknown outcome, an unparseable time)."""
    return HistoryQuery(
        trigger_id=trigger_id,
        outcomes=frozenset(parse_outcome(text) for text in outcomes),
        since=instant(since, now=now, local=local),
        until=instant(until, now=now, local=local),
        limit=limit,
    )


def audit_query(
    *,
    trigger_id: str | None,
    run_id: str | None,
    actions: Iterable[str],
    since: str | None,
    until: str | None,
    limit: int,
    now: datetime,
    local: bool = False,
) -> AuditQuery:
    """`audit-log`'s filters. Raises InputError (an unknown action, an unparseable time)."""
    return AuditQuery(
        trigger_id=trigger_id,
        run_id=run_id,
        actions=frozenset(parse_action(text) for text in actions),
        since=instant(since, now=now, local=local),
        until=instant(until, now=now, local=local),
        limit=limit,
    )
