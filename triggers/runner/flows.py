"""Flow definitions stored in the runtime's registry, through the one error door.

Each function here answers a `register(name, definition) -> version` that raises
DeclarationError for an invalid definition and RunnerUnavailableError when the
database does not answer (`triggers.runner.door`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from triggers.clock import to_ms
from triggers.runner.door import runtime_door

if TYPE_CHECKING:
    from looms_runtime import Runtime
    from looms_runtime.db import Database

Register = Callable[[str, Mapping[str, Any]], str]


def registry_flows(db: Database, *, now: datetime) -> Register:
    """Registration by the registry alone: no engine is loaded (`triggers apply`)."""

    def register(name: str, definition: Mapping[str, Any]) -> str:
        from looms_runtime.registry import register_flow  # noqa: PLC0415 (kept off --help)

        with runtime_door(f"flow {name!r}"):
            return register_flow(db, name, definition, now_ms=to_ms(now))

    return register


def runtime_flows(runtime: Runtime) -> Register:
    """Registration by the daemon's runtime (at start and at each reload)."""

    def register(name: str, definition: Mapping[str, Any]) -> str:
        with runtime_door(f"flow {name!r}"):
            return runtime.register_flow(name, definition)

    return register
