"""The statuses a run's header holds (the schema's and the reads' one list)."""

from __future__ import annotations

RUN_STATUSES = ("active", "parked", "completed", "failed", "cancelled")
UNSETTLED = ("active", "parked")

__all__ = ["RUN_STATUSES", "UNSETTLED"]
