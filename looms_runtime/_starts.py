"""Start requests: validated, given an identity, and compared with an existing run."""

from __future__ import annotations

import json
from typing import Any

from looms_runtime._canonical import canonical_json, new_run_id, text_digest
from looms_runtime._definitions import FlowDef
from looms_runtime._events import EventType, new_event
from looms_runtime._fold import fold
from looms_runtime._loading import LoadedRun
from looms_runtime._rows import ExistingRun, NewRun, RunHeader
from looms_runtime.errors import InvalidRequestError, StartConflictError, UnknownFlowError
from looms_runtime.records import StartRequest


def identity_hash(*, flow: str, version: str, input_json: str, env_json: str) -> str:
    """What makes two starts the same run: flow, version, input and env (not attributes)."""
    return text_digest(flow, version, input_json, env_json)


def prepare(request: StartRequest, *, owner: str, now_ms: int) -> NewRun:
    """The run a request would create.

    Raises:
        InvalidRequestError: a field has the wrong type or a value is not JSON.
    """
    for name in ("flow", "version", "idempotency_key"):
        value = getattr(request, name)
        if not isinstance(value, str) or not value:
            raise InvalidRequestError(f"{name} must be a non-empty string", field=name)
    env: dict[Any, Any] = dict(request.env or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise InvalidRequestError("env must map strings to strings", field="env")
    attributes_json = canonical_json(dict(request.attributes or {}))
    input_json = canonical_json(request.input)
    env_json = canonical_json(env)
    run_input = json.loads(input_json)
    started = new_event(
        EventType.RUN_STARTED, flow=request.flow, version=request.version, input=run_input
    )
    return NewRun(
        run_id=new_run_id(now_ms),
        flow=request.flow,
        version=request.version,
        idempotency_key=request.idempotency_key,
        identity_hash=identity_hash(
            flow=request.flow, version=request.version, input_json=input_json, env_json=env_json
        ),
        input=run_input,
        env=env,
        attributes=json.loads(attributes_json),
        owner=owner,
        started=started,
        now_ms=now_ms,
        input_json=input_json,
        env_json=env_json,
        attributes_json=attributes_json,
        started_json=canonical_json(started.payload),
    )


def conflict(new: NewRun, existing: ExistingRun) -> StartConflictError | None:
    """The conflict between a request and the run its key names, or None when they agree."""
    if existing.identity_hash == new.identity_hash:
        return None
    differs = [
        name
        for name, mine, theirs in (
            ("flow", new.flow, existing.flow),
            ("version", new.version, existing.version),
            ("input", canonical_json(new.input), canonical_json(existing.input)),
            ("env", canonical_json(dict(new.env)), canonical_json(dict(existing.env or {}))),
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


def seeded(new: NewRun, flow: FlowDef) -> LoadedRun:
    """The working copy of a just-inserted run, built without reading it back."""
    header = RunHeader(
        run_id=new.run_id,
        flow=new.flow,
        version=new.version,
        idempotency_key=new.idempotency_key,
        identity_hash=new.identity_hash,
        status="active",
        input=new.input,
        env=new.env,
        attributes=new.attributes,
        result=None,
        error=None,
        last_seq=1,
        snapshot_seq=0,
        lease_owner=new.owner,
        lease_epoch=1,
        next_wake_at=None,
        created_at=new.now_ms,
        updated_at=new.now_ms,
        settled_at=None,
    )
    return LoadedRun(header=header, flow=flow, state=fold([new.started]), snapshot_seq=0, inbox=[])


def unknown_flow(request: StartRequest) -> UnknownFlowError:
    """The error for a request naming a flow version that is not registered."""
    return UnknownFlowError(
        f"no flow {request.flow!r} at version {request.version!r}",
        flow=request.flow,
        version=request.version,
    )
