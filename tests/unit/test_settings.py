"""Settings and scheduler options share one source of defaults and carry over by name;
the CLI's reader of the one setting `status` needs agrees with the settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from triggers.cli import _backend
from triggers.cli._app import options
from triggers.errors import ConfigError
from triggers.locations import Environment
from triggers.scheduler.options import SchedulerOptions
from triggers.settings import SCHEDULER_SETTINGS, Settings, load_settings

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


POLL_INTERVALS = [None, "5s", "90", "1.5", " 2m ", "1h 30m", "soon", "", "0s", "-5s", "5M"]


@pytest.mark.parametrize("value", POLL_INTERVALS, ids=repr)
def test_the_cli_reads_the_poll_interval_as_the_settings_do(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {} if value is None else {"TRIGGERS_POLL_INTERVAL": value}
    for key, text in environ.items():
        monkeypatch.setenv(key, text)
    monkeypatch.setattr(options, "environment", Environment.load(environ, read_file=False))

    assert _read(_backend.poll_interval_setting) == _read(lambda: load_settings().poll_interval)


def test_the_cli_reads_the_poll_interval_from_the_environment_file_as_the_settings_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "triggers.env"
    env_file.write_text("TRIGGERS_POLL_INTERVAL=7s\n")
    monkeypatch.setattr(
        options, "environment", Environment.load({"TRIGGERS_ENV_FILE": str(env_file)})
    )
    from_file = _backend.poll_interval_setting()
    monkeypatch.setenv("TRIGGERS_POLL_INTERVAL", "3s")  # the environment wins over the file
    monkeypatch.setattr(
        options,
        "environment",
        Environment.load({"TRIGGERS_ENV_FILE": str(env_file), "TRIGGERS_POLL_INTERVAL": "3s"}),
    )

    assert from_file == timedelta(seconds=7)
    assert _backend.poll_interval_setting() == load_settings(env_file=env_file).poll_interval
    assert _backend.poll_interval_setting() == timedelta(seconds=3)


def _read(setting: Callable[[], timedelta]) -> object:
    """The value, or the message and details of the ConfigError raised instead."""
    try:
        return setting()
    except ConfigError as err:
        return (str(err), err.details)


def test_worker_settings_default_to_a_process_a_core_and_read_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert Settings().worker_processes == 6
    assert Settings().worker_max_rss is None

    monkeypatch.setenv("TRIGGERS_WORKER_MAX_RSS", "512MiB")
    monkeypatch.setenv("TRIGGERS_WORKER_PROCESSES", "0")
    settings = load_settings()

    assert settings.worker_max_rss == 512 << 20
    assert settings.worker_processes == 0


def test_a_worker_memory_limit_that_is_no_size_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIGGERS_WORKER_MAX_RSS", "lots")

    with pytest.raises(ConfigError, match="TRIGGERS_WORKER_MAX_RSS"):
        load_settings()


def test_a_metrics_address_reads_as_the_apis_and_a_malformed_one_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRIGGERS_METRICS_ADDRESS", "[::1]:9464")
    assert load_settings().metrics_address == "[::1]:9464"
    monkeypatch.setenv("TRIGGERS_METRICS_ADDRESS", "")
    assert load_settings().metrics_address is None  # empty in an environment file: off
    monkeypatch.setenv("TRIGGERS_METRICS_ADDRESS", "9464")

    with pytest.raises(ConfigError, match="TRIGGERS_METRICS_ADDRESS"):
        load_settings()
