"""Resuming many runs at once: after a start, and after a takeover.

Runs are read in chunks (four queries per chunk instead of four per run) and each
is handed to its worker with its state already folded. Runs that cannot be read
this way are driven one by one, where any failure is reported and retried.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from looms_runtime._store.loading import load_owned_runs
from looms_runtime._store.registry import FlowRegistry
from looms_runtime._workers.actors import DRIVE, Actors, Op
from looms_runtime.db import Database
from looms_runtime.errors import LoomsError

log = structlog.get_logger()

CHUNK = 500


def resume(
    db: Database,
    flows: FlowRegistry,
    actors: Actors,
    run_ids: Sequence[str],
    *,
    owner: str,
    running: Callable[[], bool],
) -> None:
    """Hand every run to its worker; re-arms timers and finds effects left in flight."""
    for start in range(0, len(run_ids), CHUNK):
        if not running():
            return
        chunk = run_ids[start : start + CHUNK]
        try:
            loaded, leftover = load_owned_runs(db, flows, chunk, owner=owner)
        except LoomsError as exc:
            log.warning("resume_chunk_failed", error=exc.message, runs=len(chunk))
            loaded, leftover = [], list(chunk)
        for run in loaded:
            actors.submit(run.header.run_id, Op("drive", seed=run))
        for run_id in leftover:
            actors.submit(run_id, DRIVE)
    log.info("runs_resumed", runs=len(run_ids))
