"""Which database a command uses: the documented order, and URLs checked without echoing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from triggers import locations
from triggers.errors import ConfigError
from triggers.locations import Environment, locate_database


def env(tmp_path: Path, file_text: str | None = None, **values: str) -> Environment:
    environ = {"TRIGGERS_ENV_FILE": "", **values}
    if file_text is not None:
        path = tmp_path / "triggers.env"
        path.write_text(file_text)
        environ["TRIGGERS_ENV_FILE"] = str(path)
    return Environment.load(environ)


def locate(
    environment: Environment, tmp_path: Path, **kwargs: object
) -> locations.DatabaseLocation:
    kwargs.setdefault("service_directories", (tmp_path / "service",))
    kwargs.setdefault("user_directory", tmp_path / "user")
    return locate_database(environment, **kwargs)  # type: ignore[arg-type]


def test_the_flag_wins_over_the_environment_and_the_file(tmp_path: Path) -> None:
    found = locate(
        env(
            tmp_path,
            "TRIGGERS_DATABASE_URL=sqlite:////file.sqlite\n",
            TRIGGERS_DATABASE_URL="sqlite:////env.sqlite",
        ),
        tmp_path,
        url="sqlite:////flag.sqlite",
    )
    assert (found.url, found.source) == ("sqlite:////flag.sqlite", "--database-url")


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    found = locate(
        env(
            tmp_path,
            "TRIGGERS_DATABASE_URL=sqlite:////file.sqlite\n",
            TRIGGERS_DATABASE_URL="sqlite:////env.sqlite",
        ),
        tmp_path,
    )
    assert (found.url, found.source) == ("sqlite:////env.sqlite", "TRIGGERS_DATABASE_URL")


def test_the_service_environment_file_names_the_database(tmp_path: Path) -> None:
    text = '# the service\nTRIGGERS_DATABASE_URL="postgresql://app:secret@db/app"\nOTHER=1\n'
    environment = env(tmp_path, text)
    found = locate(environment, tmp_path)

    assert found.url == "postgresql+psycopg://app:secret@db/app"
    assert found.source == f"TRIGGERS_DATABASE_URL in {tmp_path / 'triggers.env'}"
    assert found.redacted == "postgresql+psycopg://app:***@db/app"
    assert "OTHER" not in environment.values  # only the TRIGGERS_ variables


def test_a_state_directory_holds_the_embedded_file(tmp_path: Path) -> None:
    from_setting = locate(env(tmp_path, TRIGGERS_STATE_DIRECTORY=str(tmp_path / "s")), tmp_path)
    from_systemd = locate(env(tmp_path, STATE_DIRECTORY=f"{tmp_path / 'sd'}:/other"), tmp_path)

    assert from_setting.sqlite_path == tmp_path / "s" / "triggers.sqlite"
    assert from_systemd.sqlite_path == tmp_path / "sd" / "triggers.sqlite"
    assert from_systemd.source == "the state directory, from $STATE_DIRECTORY (systemd)"
    assert from_setting.embedded and from_systemd.embedded


def test_the_service_state_directory_is_used_only_when_it_holds_a_database(tmp_path: Path) -> None:
    service = tmp_path / "service"
    service.mkdir()
    before = locate(env(tmp_path), tmp_path)
    (service / "triggers.sqlite").write_bytes(b"")
    after = locate(env(tmp_path), tmp_path)

    assert (before.sqlite_path, before.source) == (
        tmp_path / "user" / "triggers.sqlite",
        "the per-user data directory",
    )
    assert (after.sqlite_path, after.source) == (
        service / "triggers.sqlite",
        "the service's state directory",
    )


def test_the_default_service_directories_are_the_units(tmp_path: Path) -> None:
    assert (
        Path("/var/lib/triggers"),
        Path("/var/lib/private/triggers"),
    ) == locations.SERVICE_STATE_DIRECTORIES
    assert Path("/etc/triggers/triggers.env") == locations.ENV_FILE
    assert locations.env_file_path({}) == locations.ENV_FILE
    assert locations.env_file_path({"TRIGGERS_ENV_FILE": ""}) is None


def test_an_unreadable_environment_file_is_said_when_it_would_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path) -> dict[str, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(locations, "_read_env_file", refuse)
    environment = env(tmp_path, "TRIGGERS_DATABASE_URL=sqlite:////x.sqlite\n")

    with pytest.raises(ConfigError, match=r"cannot read .*triggers\.env") as caught:
        locate(environment, tmp_path)
    assert caught.value.exit_code == 78
    assert (
        locate(environment, tmp_path, url="sqlite:////given.sqlite").url
        == "sqlite:////given.sqlite"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "is not a database URL"),
        ("mysql://app:hunter2@db/app", "unsupported database ('mysql')"),
        ("postgresql+asyncpg://app:hunter2@db/app", "driver 'asyncpg'"),
        ("oracle://app:hunter2@db", "unsupported database"),
    ],
)
def test_a_bad_or_unsupported_url_is_a_configuration_error_without_its_password(
    tmp_path: Path, url: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        locate(env(tmp_path), tmp_path, url=url)
    assert message in caught.value.message
    assert "hunter2" not in caught.value.message and "hunter2" not in str(caught.value.details)
    assert caught.value.exit_code == 78


@pytest.mark.parametrize(
    ("url", "normalised", "path"),
    [
        ("sqlite:////var/x.sqlite", "sqlite:////var/x.sqlite", Path("/var/x.sqlite")),
        ("sqlite://", "sqlite://", None),
        ("postgres://u@h/d", "postgresql+psycopg://u@h/d", None),
        ("postgresql+psycopg://u@h:5433/d", "postgresql+psycopg://u@h:5433/d", None),
    ],
)
def test_supported_urls_are_kept_or_given_the_installed_driver(
    tmp_path: Path, url: str, normalised: str, path: Path | None
) -> None:
    found = locate(env(tmp_path), tmp_path, url=url)
    assert (found.url, found.sqlite_path, found.embedded) == (normalised, path, False)
