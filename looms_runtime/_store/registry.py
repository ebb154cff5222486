"""Flow definitions by name and version: stored once, parsed once, immutable after."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from looms_runtime._canonical import definition_version, json_copy
from looms_runtime._history.definitions import FlowDef, StepsFlow
from looms_runtime._history.parsing import parse_flow
from looms_runtime._history.state import GRAPH
from looms_runtime._store.driver import driver_errors
from looms_runtime._store.reads import load_flow
from looms_runtime.dbapi import read_source, writer
from looms_runtime.errors import UnknownFlowError

if TYPE_CHECKING:
    from looms_runtime.db import Database
    from looms_runtime.dbapi import ReadSource


class FlowRegistry:
    """A read-through cache over `looms_flows`; a version's definition never changes."""

    def __init__(self, db: Database | ReadSource) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._flows: dict[tuple[str, str], FlowDef] = {}

    def register(self, name: str, definition: Mapping[str, Any], *, now_ms: int) -> str:
        """Validate and store `definition` under its version; return the version.

        Raises:
            InvalidFlowError: the definition is invalid.
        """
        stored = json_copy(dict(definition))
        parsed = parse_flow(stored)
        version = definition_version(stored)
        with self._lock:
            if (name, version) in self._flows:
                return version
        from looms_runtime._store.writes import insert_flow  # noqa: PLC0415 (readers never write)

        with driver_errors(), writer(self._db).write() as conn:
            insert_flow(
                conn,
                conn.dialect.name,
                name=name,
                version=version,
                kind=parsed.kind,
                definition=stored,
                now_ms=now_ms,
            )
        with self._lock:
            self._flows[(name, version)] = parsed
        return version

    def get(self, name: str, version: str) -> FlowDef:
        """The parsed definition of `name` at `version`.

        Raises:
            UnknownFlowError: no such flow version is stored.
        """
        with self._lock:
            found = self._flows.get((name, version))
        if found is not None:
            return found
        with driver_errors(), read_source(self._db).read() as conn:
            stored = load_flow(conn, name, version)
        if stored is None:
            raise UnknownFlowError(
                f"no flow {name!r} at version {version!r}", flow=name, version=version
            )
        parsed = parse_flow(stored)
        with self._lock:
            self._flows[(name, version)] = parsed
        return parsed

    def kinds(self, pairs: Iterable[tuple[object, object]]) -> dict[tuple[str, str], str]:
        """The kind of each pair that names a stored flow version (uncached ones are read)."""
        found: dict[tuple[str, str], str] = {}
        for name, version in set(pairs):
            if type(name) is not str or type(version) is not str:
                continue
            try:
                flow = self.get(name, version)
            except UnknownFlowError:
                continue
            found[(name, version)] = (
                GRAPH if isinstance(flow, StepsFlow) and flow.graph else flow.kind
            )
        return found
