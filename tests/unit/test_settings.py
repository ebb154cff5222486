"""Settings and scheduler options share one source of defaults and carry over by name."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from triggers.scheduler.options import SchedulerOptions
from triggers.settings import SCHEDULER_SETTINGS, Settings

OPTION_DEFAULTS = {
    field.name: field.default
    for field in dataclasses.fields(SchedulerOptions)
    if field.default is not dataclasses.MISSING
}
# Options that are the daemon's business, not an operator's.
# The last two are for a scheduler that runs a simulation, not for a daemon.
NOT_SETTINGS = {
    "owner",
    "version",
    "plan_limit",
    "housekeeping_delay",
    "heartbeat_interval",
    "inline",
}


def other_value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value + timedelta(seconds=7)
    if isinstance(value, int):
        return value + 1
    return f"{value}-other"


def test_every_operator_tunable_is_a_setting() -> None:
    options = {field.name for field in dataclasses.fields(SchedulerOptions)}

    assert options - set(SCHEDULER_SETTINGS) == NOT_SETTINGS
    assert set(SCHEDULER_SETTINGS) <= set(Settings.model_fields)


def test_settings_default_to_the_scheduler_options_defaults() -> None:
    settings = Settings()
    shared = [name for name in SCHEDULER_SETTINGS if name in OPTION_DEFAULTS]

    assert shared  # host alone has no scheduler default
    for name in shared:
        assert getattr(settings, name) == OPTION_DEFAULTS[name], name


def test_scheduler_options_carry_every_scheduler_setting() -> None:
    defaults = Settings()
    changed = {name: other_value(getattr(defaults, name)) for name in SCHEDULER_SETTINGS}
    settings = Settings(**changed)

    options = settings.scheduler_options(owner="daemon-a", version="9.9")

    for name, value in changed.items():
        assert getattr(options, name) == value, name
    assert (options.owner, options.version) == ("daemon-a", "9.9")


def test_duration_settings_read_the_duration_grammar() -> None:
    settings = Settings(lease="1h30m", run_retention="2d", shutdown_grace=20)

    assert settings.lease == timedelta(minutes=90)
    assert settings.run_retention == timedelta(days=2)
    assert settings.shutdown_grace == timedelta(seconds=20)
