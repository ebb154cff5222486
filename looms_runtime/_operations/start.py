"""Start requests: validated, given an identity, and compared with an existing run.

`prepare` is on the scheduler's launch path, once per request of a batch, so it does
the least that makes a start durable: each value is serialized once (the canonical
text is what the database stores and what the identity digest covers), and nothing
is decoded back here; the worker that seeds the run decodes what it needs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import structlog
from sqlalchemy.engine import Connection

from looms_runtime._canonical import canonical_json, json_text, new_run_id, text_digest
from looms_runtime._engine.attempts import completion_at_start, first_moves
from looms_runtime._history.events import EventType
from looms_runtime._history.fold import RunState, fold
from looms_runtime._history.moves import Dispatch
from looms_runtime._history.state import GRAPH, PYTHON
from looms_runtime._store.committer import Committer
from looms_runtime._store.loading import Prestarted, started_event
from looms_runtime._store.registry import FlowRegistry
from looms_runtime._store.rows import ExistingRun, NewRun, StartJob
from looms_runtime._store.starts import insert_runs
from looms_runtime._workers.actors import DRIVE, Op
from looms_runtime.errors import (
    InvalidRequestError,
    KeyPurgedError,
    LoomsError,
    StartConflictError,
    UnknownFlowError,
)
from looms_runtime.records import RunHandle, StartRequest

log = structlog.get_logger()

_EMPTY = "{}"


def identity_hash(*, flow: str, version: str, input_json: str, env_json: str) -> str:
    """What makes two starts the same run: flow, version, input and env (not attributes)."""
    return text_digest(flow, version, input_json, env_json)


def _invalid(request: StartRequest) -> InvalidRequestError:
    for name in ("flow", "version", "idempotency_key"):
        value = getattr(request, name)
        if type(value) is not str or not value:
            return InvalidRequestError(f"{name} must be a non-empty string", field=name)
    return InvalidRequestError("env must map strings to strings", field="env")


@functools.lru_cache(maxsize=1024)
def _started_parts(flow: str, version: str, flow_kind: str) -> tuple[str, str]:
    """The canonical text of a `run_started` payload around its input (keys in sorted
    order: flow, flow_kind, input, version), so the input is not encoded twice."""
    kind = f',"flow_kind":"{flow_kind}"' if flow_kind in (PYTHON, GRAPH) else ""
    return f'{{"flow":{json_text(flow)}{kind},"input":', f',"version":{json_text(version)}}}'


def start_batch(
    requests: Sequence[StartRequest],
    *,
    kinds: Mapping[tuple[str, str], str],
    committer: Committer,
    owner: str,
    now_ms: int,
    seed: Callable[[list[tuple[str, Op]]], None],
) -> list[RunHandle | LoomsError]:
    """Start a batch of runs in one transaction (see `Runtime.start_runs`).

    `kinds` maps each registered (flow, version) to its kind; `seed` hands the
    created runs (and runs of ours stranded at their start) to the workers.
    """
    results: list[RunHandle | LoomsError | None] = [None] * len(requests)
    batch: list[tuple[int, NewRun]] = []
    for index, request in enumerate(requests):
        try:
            batch.append((index, prepare(request, owner=owner, now_ms=now_ms, kinds=kinds)))
        except LoomsError as exc:
            results[index] = exc
    if batch:
        found = committer.submit(StartJob(runs=[new for _, new in batch])).result()
        seeds = _resolve(batch, found, results, owner=owner, seeds={})
        seed(seeds)
        log.debug("runs_started", requested=len(requests), seeded=len(seeds))
    return [result for result in results if result is not None]


def start_within(
    conn: Connection,
    requests: Sequence[StartRequest],
    *,
    flows: FlowRegistry,
    owner: str,
    now_ms: int,
    marker: Mapping[str, str],
) -> tuple[list[RunHandle | LoomsError], list[tuple[str, Op]]]:
    """Start runs inside the caller's transaction, their first attempts dispatched with them
    (or, when their flow has nothing to run, their completion).

    Returns each request's handle or error, and the operations that hand the created
    runs to their workers once the caller's transaction committed (see
    `Runtime.start_within`).
    """
    kinds = flows.kinds((r.flow, r.version) for r in requests)
    results: list[RunHandle | LoomsError | None] = [None] * len(requests)
    batch: list[tuple[int, NewRun]] = []
    launches: dict[str, Prestarted] = {}
    # A new run's first moves depend on its flow version and the instant, not on its
    # input (the state after `run_started` holds none of it), so the runs of one flow
    # version in a batch share them: planned once, their events' text made once.
    planned: dict[tuple[str, str], _Plan] = {}
    for index, request in enumerate(requests):
        try:
            new = prepare(request, owner=owner, now_ms=now_ms, kinds=kinds)
        except LoomsError as exc:
            results[index] = exc
            continue
        key = (new.flow, new.version)
        plan = planned.get(key)
        if plan is None:
            plan = planned[key] = _plan(new, flows, now_ms=now_ms, marker=marker)
        if plan.first:
            new = new._replace(dispatched_json=plan.dispatched)
            launches[new.run_id] = Prestarted(new=new, launches=plan.first, state=plan.state)
        elif plan.completion:
            new = new._replace(completion=plan.completion, result_json=plan.result_json)
        batch.append((index, new))
    if not batch:
        return [r for r in results if r is not None], []
    found = insert_runs(conn, [new for _, new in batch])
    seeds = _resolve(batch, found, results, owner=owner, seeds=launches)
    return [r for r in results if r is not None], seeds


class _Plan(NamedTuple):
    """What a new run of one flow version does in its start: its first attempts (their
    dispatch events' text, and its state with them), or the events that complete it."""

    first: tuple[Dispatch, ...]
    state: RunState
    dispatched: tuple[str, ...]
    completion: tuple[tuple[str, int, str], ...]
    result_json: str


def _plan(new: NewRun, flows: FlowRegistry, *, now_ms: int, marker: Mapping[str, str]) -> _Plan:
    flow = flows.get(new.flow, new.version)
    started = fold([started_event(new)])
    first, state = first_moves(started, flow, now_ms=now_ms, marker=marker)
    dispatched = tuple(canonical_json(move.event.payload) for move in first)
    completion: tuple[tuple[str, int, str], ...] = ()
    result_json = "null"
    if not first:
        events = completion_at_start(started, flow, now_ms=now_ms)
        completion = tuple((e.type, e.version, canonical_json(e.payload)) for e in events)
        for event in events:
            if event.type == EventType.RUN_COMPLETED.value:
                result_json = canonical_json(event.payload.get("result"))
    return _Plan(first, state, dispatched, completion, result_json)


def _resolve(
    batch: Sequence[tuple[int, NewRun]],
    found: Sequence[ExistingRun | None],
    results: list[RunHandle | LoomsError | None],
    *,
    owner: str,
    seeds: Mapping[str, Prestarted],
) -> list[tuple[str, Op]]:
    """Fill in each request's result; the operations that hand the created runs (and runs
    of ours stranded at their start) to the workers."""
    ops: list[tuple[str, Op]] = []
    for (index, new), existing in zip(batch, found, strict=True):
        if existing is None:
            if new.completion:  # completed in its start: nothing for a worker to do
                results[index] = RunHandle(run_id=new.run_id, created=True, completed=True)
                continue
            results[index] = RunHandle(run_id=new.run_id, created=True)
            ops.append((new.run_id, Op("drive", seed=seeds.get(new.run_id, new))))
            continue
        results[index] = conflict(new, existing) or RunHandle(run_id=existing.run_id, created=False)
        if existing.lease_owner == owner and existing.last_seq == 1:
            # Ours and never driven: the answer to an earlier start of it may have
            # been lost before its run was handed to a worker.
            ops.append((existing.run_id, DRIVE))
    return ops


def prepare(
    request: StartRequest, *, owner: str, now_ms: int, kinds: Mapping[tuple[str, str], str]
) -> NewRun:
    """The run a request would create.

    Raises:
        InvalidRequestError: a field has the wrong type or a value is not JSON.
        UnknownFlowError: the flow version is not registered.
    """
    flow, version, key = request.flow, request.version, request.idempotency_key
    if type(flow) is not str or type(version) is not str or type(key) is not str:
        raise _invalid(request)
    if not flow or not version or not key:
        raise _invalid(request)
    flow_kind = kinds.get((flow, version))
    if flow_kind is None:
        raise unknown_flow(request)
    env = request.env
    if env:
        for name, text in env.items():
            if type(name) is not str or type(text) is not str:
                raise _invalid(request)
        env_json = canonical_json(env if type(env) is dict else dict(env))
    else:
        env_json = _EMPTY
    attributes = request.attributes
    attributes_json = canonical_json(dict(attributes)) if attributes else _EMPTY
    value = request.input
    input_json = "null" if value is None else canonical_json(value)
    head, tail = _started_parts(flow, version, flow_kind)
    started_json = head + input_json + tail
    return NewRun(
        run_id=new_run_id(now_ms),
        flow=flow,
        version=version,
        idempotency_key=key,
        identity_hash=text_digest(flow, version, input_json, env_json),
        owner=owner,
        now_ms=now_ms,
        input_json=input_json,
        env_json=env_json,
        attributes_json=attributes_json,
        started_json=started_json,
    )


def conflict(new: NewRun, existing: ExistingRun) -> StartConflictError | None:
    """The conflict between a request and the run its key names, or None when they agree."""
    if existing.purged:
        return KeyPurgedError(
            f"idempotency key {new.idempotency_key!r} named run {existing.run_id}, "
            f"which settled {existing.status} and was purged by retention",
            idempotency_key=new.idempotency_key,
            run_id=existing.run_id,
            status=existing.status,
            differs=["purged"],
        )
    if existing.identity_hash == new.identity_hash:
        return None
    differs = [
        name
        for name, mine, theirs in (
            ("flow", new.flow, existing.flow),
            ("version", new.version, existing.version),
            ("input", new.input_json, canonical_json(existing.input)),
            ("env", new.env_json, canonical_json(dict(existing.env or {}))),
        )
        if mine != theirs
    ] or ["identity"]
    return StartConflictError(
        f"idempotency key {new.idempotency_key!r} names run {existing.run_id} "
        f"started with another {', '.join(differs)}",
        idempotency_key=new.idempotency_key,
        run_id=existing.run_id,
        differs=differs,
    )


def unknown_flow(request: StartRequest) -> UnknownFlowError:
    """The error for a request naming a flow version that is not registered."""
    return UnknownFlowError(
        f"no flow {request.flow!r} at version {request.version!r}",
        flow=request.flow,
        version=request.version,
    )
