"""`fast_init` builds the record the dataclass's own `__init__` builds, and refuses
the classes it could not build exactly."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from tests.factories import spec
from triggers.clock import utc
from triggers.model import Action, FireRecord, Outcome, Trigger
from triggers.records import fast_init
from triggers.store.protocol import Claim, Settlement

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
