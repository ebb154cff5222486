"""Which database a command uses, found the way the systemd unit sets it up.

The unit gives the daemon `EnvironmentFile=-/etc/triggers/triggers.env` and
`StateDirectory=triggers`. A command typed on the same host must read the same
database, so every command looks, in this order, and takes the first it finds:

1. `--database-url URL` on the command line;
2. `TRIGGERS_DATABASE_URL` in the environment;
3. `TRIGGERS_DATABASE_URL` in the service's environment file
   (`/etc/triggers/triggers.env`, or `TRIGGERS_ENV_FILE`; empty: none);
4. `triggers.sqlite` in `TRIGGERS_STATE_DIRECTORY` (environment, then the file), or
   in `$STATE_DIRECTORY` (set by systemd for the daemon);
5. the service's state directory, when it holds a database: `/var/lib/triggers`, or
   `/var/lib/private/triggers` under `DynamicUser=` (or `TRIGGERS_SERVICE_STATE_DIRECTORY`);
6. the per-user data directory (`~/.local/share/triggers/triggers.sqlite` on Linux).

The daemon does not read the environment file itself: systemd hands it the file's
values, and the file may be readable by root only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triggers.errors import ConfigError

ENV_FILE = Path("/etc/triggers/triggers.env")
SERVICE_STATE_DIRECTORIES = (Path("/var/lib/triggers"), Path("/var/lib/private/triggers"))
DATABASE_FILE = "triggers.sqlite"
_PREFIX = "TRIGGERS_"
_SUPPORTED = "sqlite:///PATH or postgresql+psycopg://USER@HOST/DATABASE"


@dataclass(frozen=True, slots=True, kw_only=True)
class Environment:
    """The `TRIGGERS_*` values a command sees: its environment over the environment file."""

    values: Mapping[str, str] = field(default_factory=dict)
    """Every `TRIGGERS_*` variable, the process environment winning over the file."""
    origins: Mapping[str, str] = field(default_factory=dict)
    """For each value: `environment`, or the path of the file it came from."""
    env_file: Path | None = None
    """The environment file that was read, if any."""
    unreadable: Path | None = None
    """An environment file that exists but could not be read (permissions)."""
    raw: Mapping[str, str] = field(default_factory=dict)
    """The process environment (for `STATE_DIRECTORY`, which systemd sets)."""

    @classmethod
    def load(
        cls, environ: Mapping[str, str] | None = None, *, read_file: bool = True
    ) -> Environment:
        """Read the process environment and, when `read_file`, the environment file."""
        environ = os.environ if environ is None else environ
        own = {key: value for key, value in environ.items() if key.startswith(_PREFIX)}
        origins = dict.fromkeys(own, "environment")
        values = dict(own)
        path = env_file_path(environ) if read_file else None
        env_file = unreadable = None
        if path is not None and path.exists():
            try:
                from_file = _read_env_file(path)
            except PermissionError:
                unreadable = path
            else:
                env_file = path
                for key, value in from_file.items():
                    if key.startswith(_PREFIX) and key not in values:
                        values[key] = value
                        origins[key] = str(path)
        return cls(
            values=values,
            origins=origins,
            env_file=env_file,
            unreadable=unreadable,
            raw=dict(environ),
        )

    def get(self, name: str) -> str | None:
        """A `TRIGGERS_*` value; an empty one counts as unset, as in systemd."""
        return self.values.get(name) or None


def env_file_path(environ: Mapping[str, str]) -> Path | None:
    """The service's environment file: `TRIGGERS_ENV_FILE` (empty: none), else the default."""
    given = environ.get("TRIGGERS_ENV_FILE")
    if given is None:
        return ENV_FILE
    return Path(given) if given else None


def _read_env_file(path: Path) -> dict[str, str]:
    # Imported only when a file exists: most machines have none.
    from dotenv import dotenv_values  # noqa: PLC0415

    path.open().close()  # PermissionError here, before the parser swallows it
    return {key: value for key, value in dotenv_values(path).items() if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class DatabaseLocation:
    """A database URL and what chose it."""

    url: str
    """The SQLAlchemy URL; it may hold a password, so show `redacted` instead."""
    source: str
    """What chose it, in words (`TRIGGERS_DATABASE_URL in /etc/triggers/triggers.env`)."""
    sqlite_path: Path | None = None
    """The SQLite file, or None for PostgreSQL and in-memory SQLite."""
    embedded: bool = False
    """The default file in a state or data directory (its directory may be created)."""

    @property
    def redacted(self) -> str:
        """The URL with any password replaced by `***`."""
        if self.sqlite_path is not None and _plain_sqlite_path(self.url) is not None:
            return self.url  # a file: no password to hide (and no SQLAlchemy to load)
        from sqlalchemy.engine import make_url  # noqa: PLC0415

        return make_url(self.url).render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        return "sqlite" if self.url.startswith("sqlite") else "postgresql"


def locate_database(
    environment: Environment,
    *,
    url: str | None = None,
    url_source: str = "--database-url",
    state_directory: Path | None = None,
    service_directories: tuple[Path, ...] | None = None,
    user_directory: Path | None = None,
) -> DatabaseLocation:
    """The database a command uses (the order is in the module doc).

    `url` and `state_directory` are what the command line (or the daemon's settings)
    gave; the rest comes from `environment`. Nothing is created or checked on disk
    except whether a service state directory holds a database.

    Raises:
        ConfigError: the URL is not one, names an unsupported database, or the
            environment file that would decide is unreadable.
    """
    if url:
        return _from_url(url, url_source)
    given = environment.get("TRIGGERS_DATABASE_URL")
    if given:
        return _from_url(given, _described("TRIGGERS_DATABASE_URL", environment))
    if environment.unreadable is not None:
        raise ConfigError(
            f"cannot read {environment.unreadable} (the service's settings, which may name "
            "its database): permission denied; run the command as a user who can read it, "
            "or set TRIGGERS_DATABASE_URL, or TRIGGERS_ENV_FILE= to ignore the file",
            env_file=str(environment.unreadable),
        )
    directory = state_directory
    source = "TRIGGERS_STATE_DIRECTORY"
    if directory is None and environment.get("TRIGGERS_STATE_DIRECTORY"):
        directory = Path(environment.values["TRIGGERS_STATE_DIRECTORY"])
        source = _described("TRIGGERS_STATE_DIRECTORY", environment)
    systemd_state = environment.raw.get("STATE_DIRECTORY")
    if directory is None and systemd_state:
        # systemd may pass several, colon-separated; the first is ours.
        directory = Path(systemd_state.split(":")[0])
        source = "$STATE_DIRECTORY (systemd)"
    if directory is not None:
        return _embedded(directory, f"the state directory, from {source}")
    for candidate in service_directories or _service_directories(environment):
        try:
            found = (candidate / DATABASE_FILE).is_file()
        except OSError:  # /var/lib/private is root's only
            found = False
        if found:
            return _embedded(candidate, "the service's state directory")
    return _embedded(user_directory or _user_directory(), "the per-user data directory")


def _service_directories(environment: Environment) -> tuple[Path, ...]:
    override = environment.get("TRIGGERS_SERVICE_STATE_DIRECTORY")
    return (Path(override),) if override else SERVICE_STATE_DIRECTORIES


def _user_directory() -> Path:
    import platformdirs  # noqa: PLC0415 (only when nothing else decides)

    return Path(platformdirs.user_data_dir("triggers"))


def _described(name: str, environment: Environment) -> str:
    origin = environment.origins.get(name, "environment")
    return name if origin == "environment" else f"{name} in {origin}"


def _embedded(directory: Path, source: str) -> DatabaseLocation:
    path = directory / DATABASE_FILE
    return DatabaseLocation(url=f"sqlite:///{path}", source=source, sqlite_path=path, embedded=True)


_PLAIN_SQLITE = ("sqlite:///", "sqlite+pysqlite:///")


def _plain_sqlite_path(url: str) -> Path | None:
    """The file of a plain SQLite URL (`sqlite:///relative`, `sqlite:////absolute`: no
    query, no escapes), read as SQLAlchemy reads it but without loading it (a CLI
    query on SQLite never does); None for any other URL."""
    for prefix in _PLAIN_SQLITE:
        if url.startswith(prefix):
            database = url[len(prefix) :]
            if database and database != ":memory:" and not set("?%#") & set(database):
                return None if database.startswith("file:") else Path(database)
    return None


def _from_url(text: str, source: str) -> DatabaseLocation:
    """Check a URL and normalise its PostgreSQL driver; never echoes the URL (a password)."""
    plain = _plain_sqlite_path(text.strip())
    if plain is not None:
        return DatabaseLocation(url=text.strip(), source=source, sqlite_path=plain)
    from sqlalchemy.engine import make_url  # noqa: PLC0415
    from sqlalchemy.exc import ArgumentError  # noqa: PLC0415

    try:
        parsed = make_url(text.strip())
    except (ArgumentError, ValueError):
        raise ConfigError(
            f"{source} is not a database URL; expected {_SUPPORTED}", source=source
        ) from None
    name, _, driver = parsed.drivername.partition("+")
    if name == "sqlite" and driver in ("", "pysqlite"):
        database = parsed.database or ""
        memory = database in ("", ":memory:") or database.startswith("file:")
        path = None if memory else Path(database)
        return DatabaseLocation(url=text.strip(), source=source, sqlite_path=path)
    if name in ("postgresql", "postgres"):
        if driver not in ("", "psycopg"):
            raise ConfigError(
                f"{source} names the PostgreSQL driver {driver!r}, which is not installed; "
                "use postgresql+psycopg://...",
                source=source,
            )
        # `postgresql://` would pick psycopg2; psycopg (3) is the driver this ships with.
        normalised = parsed.set(drivername="postgresql+psycopg")
        return DatabaseLocation(url=normalised.render_as_string(hide_password=False), source=source)
    raise ConfigError(
        f"{source} names an unsupported database ({parsed.drivername!r}); expected {_SUPPORTED}",
        source=source,
        drivername=parsed.drivername,
    )
