"""Daemon and CLI settings: environment (`TRIGGERS_*`), then CLI flags on top.

Built only by the composition roots (`cli.py`, `daemon.py`); code below them
takes keyword parameters. Invalid values raise ConfigError (exit 78), so systemd
does not restart-loop on a typo in the environment file.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from triggers.durations import parse_duration
from triggers.errors import ConfigError

_DURATION_FIELDS = (
    "poll_interval",
    "fire_retention",
    "lease",
    "start_timeout",
    "inspect_timeout",
    "cancel_timeout",
    "run_poll_interval",
    "shutdown_grace",
    "run_retention",
)


class Settings(BaseSettings):
    """Every setting, with its `TRIGGERS_` environment variable."""

    model_config = SettingsConfigDict(
        env_prefix="TRIGGERS_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    database_url: SecretStr | None = None
    """None: the embedded SQLite file `triggers.sqlite` in the state directory."""
    config: Path | None = None
    """The declarations file the daemon applies at start and on SIGHUP."""
    state_directory: Path | None = None
    """Where the embedded database lives; default `$STATE_DIRECTORY` or a per-user dir."""
    log_format: Literal["json", "console"] | None = None
    """None: JSON lines unless stderr is a terminal."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    host: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200)
    concurrency: int = Field(default=8, ge=1, le=256)
    """Launch and inspection calls in flight at once."""
    workers: int = Field(default=16, ge=1, le=1024)
    """Runtime worker threads (steps executing at once)."""
    poll_interval: timedelta = timedelta(seconds=5)
    """Longest sleep between ticks, to see other daemons' and operators' changes."""
    fire_retention: timedelta = timedelta(days=30)
    lease: timedelta = timedelta(minutes=5)
    """How long a claimed launch stays reserved before another daemon may retry it."""
    start_timeout: timedelta = timedelta(minutes=4)
    inspect_timeout: timedelta = timedelta(seconds=30)
    cancel_timeout: timedelta = timedelta(seconds=30)
    run_poll_interval: timedelta = timedelta(seconds=15)
    """How often active runs are inspected when the runtime does not report first."""
    shutdown_grace: timedelta = timedelta(seconds=10)
    run_retention: timedelta | None = timedelta(days=30)
    """Settled runs older than this are purged (their key stays taken); None: kept."""
    trim_events: bool = False
    """Delete a run's events behind its snapshots (`runs events` then starts later)."""
    metrics_address: str | None = None
    """`host:port` (or `:port`, loopback) to serve Prometheus metrics on; None: off."""
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"

    @field_validator(*_DURATION_FIELDS, mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return parse_duration(value)
        return value

    def resolved_state_directory(self) -> Path:
        if self.state_directory is not None:
            return self.state_directory
        systemd_state = os.environ.get("STATE_DIRECTORY")
        if systemd_state:
            # systemd may pass several, colon-separated; the first is ours.
            return Path(systemd_state.split(":")[0])
        return Path(platformdirs.user_data_dir("triggers"))

    def resolved_database_url(self) -> str:
        """The database URL, creating the state directory for the embedded default."""
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        directory = self.resolved_state_directory()
        directory.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{directory / 'triggers.sqlite'}"

    def redacted_database_url(self) -> str:
        """The URL with any password hidden, for logs and `status`."""
        from sqlalchemy.engine import make_url  # noqa: PLC0415 (keep settings import light)

        return make_url(self.resolved_database_url()).render_as_string(hide_password=True)


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment with `overrides` (CLI flags) on top.

    Raises:
        ConfigError: a value is invalid; the message names the variable.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = [
            f"TRIGGERS_{'__'.join(str(p) for p in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        ]
        raise ConfigError("invalid settings: " + "; ".join(problems), problems=problems) from exc
