"""`fast_init` builds the record the dataclass's own `__init__` builds, and refuses
the classes it could not build exactly; the records that write their `__init__` out
(a native constructor when compiled) set every field as the dataclass would."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.model import Action, FireRecord, Outcome, Overlap, Reason, Trigger
from triggers.records import fast_init
from triggers.runner.protocol import LaunchRequest, RunHandle
from triggers.scheduler.dispatch import TickReport
from triggers.scheduler.occurrences import DuePlan
from triggers.store._decide import Counters
from triggers.store._memory_claims import _Decided as Decided
from triggers.store._memory_rows import FireRow
from triggers.store.protocol import Claim, ClaimRequest, Settlement

AT = utc(2027, 1, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plain:
    name: str
    count: int = 1
    note: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Fast:
    name: str
    count: int = 1
    note: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Empty:
    pass


def test_a_fast_record_holds_what_the_dataclass_record_holds() -> None:
    plain, fast = Plain(name="a", count=3), Fast(name="a", count=3)
    assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
    assert Fast(name="b") == Fast(name="b", count=1, note=None)
    assert repr(Fast(name="b")) == "Fast(name='b', count=1, note=None)"
    assert Empty() == Empty()


def test_a_fast_record_stays_keyword_only_complete_and_frozen() -> None:
    with pytest.raises(TypeError):
        Fast("a")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(name="a", other=1)  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fast(name="a").count = 2  # type: ignore[misc]


def test_the_records_of_an_occurrence_take_their_defaults() -> None:
    trigger = Trigger(
        spec=spec("a", cron="0 * * * *"), revision=2, watermark_at=AT, created_at=AT, updated_at=AT
    )
    assert (trigger.paused, trigger.active_count, trigger.blocked_by) == (False, 0, None)
    assert dataclasses.replace(trigger, active_count=1).active_count == 1
    claim = Claim(trigger=trigger, occurrence_at=AT, action=Action.FIRE, idempotency_key="a:k")
    assert (claim.trigger_id, claim.kind, claim.run_id, claim.launches) == (
        "a",
        "scheduled",
        None,
        True,
    )
    assert Settlement(trigger_id="a", run_id="r", state="completed").error is None
    record = FireRecord(trigger_id="a", occurrence_at=AT, outcome=Outcome.COMPLETED)
    assert record == FireRecord(
        trigger_id="a", occurrence_at=AT, outcome=Outcome.COMPLETED, count=1, manual_key=""
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WithFactory:
    items: list[int] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class Mutable:
    x: int


@dataclass(frozen=True, kw_only=True)
class Unslotted:
    x: int


@dataclass(frozen=True, slots=True)
class Positional:
    x: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    x: int

    def __post_init__(self) -> None:
        pass


@pytest.mark.parametrize(
    "cls",
    [WithFactory, Mutable, Unslotted, Positional, Checked],
    ids=["default-factory", "not-frozen", "not-slotted", "positional", "post-init"],
)
def test_a_class_it_could_not_build_exactly_is_refused(cls: type) -> None:
    with pytest.raises(TypeError):
        fast_init(cls)


# The records whose `__init__` is written out (a native constructor when compiled),
# each with an argument of its type for every field, no two alike, so that a field
# set from the wrong argument shows (compiled, an `__init__` checks the types).
_AT = [utc(2027, 1, 1, n) for n in range(1, 8)]
_TRIGGER = Trigger(
    spec=spec("a", cron="0 * * * *"), revision=2, watermark_at=AT, created_at=AT, updated_at=AT
)
_REQUEST = ClaimRequest(trigger_id="a", occurrence_at=AT, expected_revision=2)
_ROW = FireRow(trigger_id="a", occurrence_at=AT, outcome=Outcome.LAUNCHED)
WRITTEN: dict[type, dict[str, Any]] = {
    Trigger: {
        "spec": spec("b", cron="5 * * * *"),
        "revision": 3,
        "paused": True,
        "pause_note": "note",
        "paused_at": _AT[0],
        "retired": True,
        "watermark_at": _AT[1],
        "active_count": 4,
        "buffered_count": 5,
        "runs_launched": 6,
        "blocked_by": "run-1",
        "created_at": _AT[2],
        "updated_at": _AT[3],
    },
    FireRecord: {
        "trigger_id": "a",
        "occurrence_at": _AT[0],
        "outcome": Outcome.FAILED,
        "reason": Reason.BLOCKED,
        "run_id": "run-1",
        "revision": 3,
        "host": "host",
        "claimed_at": _AT[1],
        "launched_at": _AT[2],
        "settled_at": _AT[3],
        "error": "error",
        "last_occurrence_at": _AT[4],
        "count": 7,
        "manual_key": "key",
        "idempotency_key": "a:key",
        "blocked_by": "run-2",
    },
    ClaimRequest: {
        "trigger_id": "a",
        "occurrence_at": _AT[0],
        "expected_revision": 3,
        "kind": "manual",
        "manual_key": "key",
        "overlap": Overlap.SKIP,
    },
    Claim: {
        "trigger": _TRIGGER,
        "occurrence_at": _AT[0],
        "action": Action.FIRE,
        "idempotency_key": "a:key",
        "kind": "backfill",
        "manual_key": "key",
        "reason": Reason.OVERLAP,
        "reservation": "lease",
        "supersedes_run_id": "run-1",
        "run_id": "run-2",
        "refused": "refused",
        "retry_at": _AT[1],
        "completed": True,
    },
    Settlement: {"trigger_id": "a", "run_id": "run-1", "state": "failed", "error": "error"},
    LaunchRequest: {
        "idempotency_key": "a:key",
        "flow": "flow",
        "flow_version": "v1",
        "input": {"x": 1},
        "trigger_id": "a",
        "occurrence_at": _AT[0],
    },
    RunHandle: {"run_id": "run-1", "created": True, "completed": True},
    DuePlan: {"dispatch": [_AT[0]], "missed": [], "watermark_at": _AT[1], "truncated": True},
    FireRow: {
        "id": 9,
        "trigger_id": "a",
        "occurrence_at": _AT[0],
        "outcome": Outcome.FAILED,
        "last_occurrence_at": _AT[1],
        "count": 7,
        "manual_key": "key",
        "idempotency_key": "a:key",
        "kind": "manual",
        "reason": Reason.BLOCKED,
        "run_id": "run-1",
        "supersedes_run_id": "run-2",
        "blocked_by": "run-3",
        "revision": 3,
        "host": "host",
        "claimed_at": _AT[2],
        "launched_at": _AT[3],
        "settled_at": _AT[4],
        "error": "error",
        "reservation": "lease",
        "lease_owner": "owner",
        "lease_expires_at": _AT[5],
    },
    Decided: {
        "request": _REQUEST,
        "key": "a:key",
        "action": Action.SUPERSEDE,
        "reason": Reason.OVERLAP,
        "launching": True,
        "reservation": "lease",
        "supersedes": "run-1",
        "run_id": "run-2",
        "refused": "refused",
        "retry_at": _AT[0],
        "row": _ROW,
        "completed": True,
    },
    Counters: {"active_count": 1, "buffered_count": 2, "runs_launched": 3},
}


def _call(cls: type, values: dict[str, Any]) -> Any:
    """A record built by the class's written-out `__init__`: in plain Python the one
    `fast_init` replaced (its `__wrapped__`), compiled the class's own."""
    keywords = all(f.kw_only for f in dataclasses.fields(cls) if f.init)
    args, kwargs = ((), values) if keywords else (tuple(values.values()), {})
    written = getattr(cls.__dict__["__init__"], "__wrapped__", None)
    if written is None:
        return cls(*args, **kwargs)
    record: Any = object.__new__(cls)
    written(record, *args, **kwargs)
    return record


@pytest.mark.parametrize("cls", list(WRITTEN), ids=lambda cls: cls.__name__)
def test_a_written_out_init_sets_every_field_to_its_argument(cls: type) -> None:
    values = WRITTEN[cls]
    assert list(values) == [f.name for f in dataclasses.fields(cls) if f.init]
    record = _call(cls, values)
    assert {name: getattr(record, name) for name in values} == values


@pytest.mark.parametrize("cls", list(WRITTEN), ids=lambda cls: cls.__name__)
def test_a_written_out_init_has_the_fields_defaults(cls: type) -> None:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    required = {f.name: WRITTEN[cls][f.name] for f in fields if f.default is dataclasses.MISSING}
    record = _call(cls, required)
    for f in fields:
        expected = required[f.name] if f.default is dataclasses.MISSING else f.default
        assert getattr(record, f.name) is expected, f.name
    if cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, fields[0].name, None)


def test_a_tick_report_starts_at_zero_with_its_own_outcomes() -> None:
    first, second = TickReport(), TickReport()
    assert (first.claimed, first.launched, first.ranges, first.errors) == (0, 0, 0, 0)
    assert (first.polled, first.outcomes) == (False, {})
    assert first.outcomes is not second.outcomes
