"""External requests (cancel, signal, operator retry): recorded, then delivered.

The inbox row is the request's durable form and its deduplication key; delivery to
the run's worker in this process is only the fast path. A run owned elsewhere (or a
request refused for a full queue) gets it through the owner's poll of the inbox.
"""

from __future__ import annotations

import structlog

from looms_runtime._actors import Actors, Op
from looms_runtime._planner import InboxItem
from looms_runtime._queries import read_statuses
from looms_runtime._store_control import record_request
from looms_runtime.db import Database
from looms_runtime.errors import RunNotFoundError, RunOverloadedError
from looms_runtime.records import RunStatusInfo
from looms_runtime.schema import UNSETTLED

log = structlog.get_logger()


def deliver_request(
    db: Database,
    actors: Actors | None,
    run_id: str,
    item: InboxItem,
    *,
    request_hash: str | None,
    now_ms: int,
) -> RunStatusInfo | None:
    """Record a request durably, then hand it to the run's worker (when `actors` run here).

    Returns:
        The run's status when it is settled (the request is then not recorded), else None.

    Raises:
        RunNotFoundError: no run has that id.
        RunOverloadedError: the run's queue of requests is full (checked before recording).
    """
    if actors is not None and item.kind != "cancel":
        actors.check_capacity(run_id)
    status = record_request(db, run_id, item, request_hash, now_ms=now_ms)
    if status is None:
        raise RunNotFoundError(f"no run {run_id!r}", run_id=run_id)
    if status not in UNSETTLED:
        return read_statuses(db, [run_id])[run_id]
    if actors is not None:
        try:
            actors.submit(run_id, Op("drive", requests=(item,)), external=True)
        except RunOverloadedError:
            # The request is durable already: the maintenance poll delivers it later.
            log.warning("request_deferred_to_poll", run_id=run_id, kind=item.kind)
    return None
