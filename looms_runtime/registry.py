"""Storing flow definitions by version without a runtime: for a process that only
declares flows (`triggers apply`), so it never loads the engine, the effects or the
workers that running them takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from looms_runtime._store.registry import FlowRegistry
from looms_runtime.db import Database


def register_flow(db: Database, name: str, definition: Mapping[str, Any], *, now_ms: int) -> str:
    """Store a flow definition under its version (idempotent) and return the version,
    as `Runtime.register_flow` does.

    Raises:
        InvalidFlowError: the definition is invalid (`details["problems"]` says why).
        DatabaseUnavailableError: the database could not be reached.
    """
    return FlowRegistry(db).register(name, definition, now_ms=now_ms)
