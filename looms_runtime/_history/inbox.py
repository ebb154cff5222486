"""The requests a run's owner has not folded into its log yet (pure values).

Apart from the planner's moves, so the store reads its inbox rows without loading
the flow definitions the moves refer to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxItem:
    """A durable external request not yet folded into the log (cancel, signal, retry)."""

    key: str
    kind: str
    name: str | None = None
    payload: Any = None
