"""docs/catalogue.md lists exactly what the code logs, serves and raises."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from looms_runtime import errors as looms_errors
from tests.catalogue import (
    catalogued_codes,
    catalogued_events,
    catalogued_metrics,
    logged_events,
    section,
    table_rows,
)
from triggers import errors as triggers_errors
from triggers.metrics import Metrics, TriggerGauge
from triggers.runner.door import translated


def _error_classes() -> list[type[Exception]]:
    classes: list[type[Exception]] = []
    for module, base in (
        (triggers_errors, triggers_errors.TriggersError),
        (looms_errors, looms_errors.LoomsError),
    ):
        classes.extend(
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, base)
        )
    return classes


def _exit_code(cls: type[Exception]) -> int:
    if issubclass(cls, triggers_errors.TriggersError):
        return int(cls.exit_code)
    assert issubclass(cls, looms_errors.LoomsError)
    # What the CLI exits with: the runtime's errors reach it translated, at the door.
    return int(translated(cls("probe")).exit_code)


def test_every_error_class_has_a_unique_valid_code() -> None:
    codes = [cls.code for cls in _error_classes()]  # type: ignore[attr-defined]

    assert all(re.fullmatch(r"(TRG|LMS)-\d{3}", code) for code in codes), codes
    assert len(codes) == len(set(codes))


def test_every_error_code_is_catalogued_with_its_class_and_exit_code() -> None:
    listed = catalogued_codes()
    rows = {row[0]: row for row in _code_rows()}
    for cls in _error_classes():
        code = cls.code  # type: ignore[attr-defined]
        assert code in listed, f"{code} ({cls.__name__}) is missing from docs/catalogue.md"
        assert listed[code] == cls.__name__
        assert rows[code][2] == str(_exit_code(cls)), f"exit code of {code}"
        assert rows[code][3], f"{code} says nothing about what to do"
    assert set(listed) == {cls.code for cls in _error_classes()}  # type: ignore[attr-defined]


def _code_rows() -> list[list[str]]:
    return table_rows(section("Error codes"))


def _served_families() -> set[str]:
    metrics = Metrics(version="1.2.3")
    metrics.watch_triggers(
        lambda: [TriggerGauge(trigger_id="a", state="enabled", blocked=True)],
        last_settled=lambda: {"completed": {"a": datetime.now(UTC)}, "failed": {}},
    )
    metrics.watch_parked(lambda: 0.0)
    metrics.watch_alerts(lambda: {"pending": 0, "delivered": 1, "failed": 0})
    metrics.watch_pools(lambda: [("db-heavy", 2, 1)])
    metrics.fired("skipped", reason="overlap")
    metrics.store_error("claim")
    metrics.reloaded("applied", at=datetime.now(UTC))
    text = generate_latest(metrics.registry).decode()
    return {family.name for family in text_string_to_metric_families(text)}


def test_every_metric_is_catalogued_and_every_catalogued_one_is_served() -> None:
    served = _served_families()
    listed = catalogued_metrics()

    assert served <= listed, f"not in docs/catalogue.md: {sorted(served - listed)}"
    documented = {name.removesuffix("_total") for name in listed}
    assert documented <= served, f"catalogued but not served: {sorted(documented - served)}"


def test_every_log_event_is_catalogued_at_the_level_it_is_logged() -> None:
    logged = logged_events()
    listed = catalogued_events()

    missing = sorted(set(logged) - set(listed))
    assert not missing, f"events missing from docs/catalogue.md: {missing}"
    stale = sorted(set(listed) - set(logged))
    assert not stale, f"catalogued events the code no longer logs: {stale}"
    for event, levels in logged.items():
        cell = listed[event]
        if "varies" in levels:
            assert "," in cell, f"{event} is logged at several levels; the catalogue says {cell!r}"
        else:
            named = {part.split(" ")[0] for part in cell.split(", ")}
            assert named == levels, f"{event}: logged at {sorted(levels)}, catalogued {cell!r}"


def test_event_names_are_constant_snake_case() -> None:
    for event in logged_events():
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", event), event
