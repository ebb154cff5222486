"""Who may call the HTTP API: listening addresses, token files, the settings that refuse
an API it must not serve, and the statuses errors are answered with."""

from __future__ import annotations

from pathlib import Path

import pytest

from looms_runtime import errors as looms
from triggers import errors
from triggers.addresses import ListenAddress, parse_address
from triggers.api._access import Tokens, api_config, read_tokens
from triggers.api._errors import error_body, status_of
from triggers.errors import ConfigError
from triggers.runner.door import translated
from triggers.settings import Settings, load_settings

GOOD = "a" * 16


@pytest.mark.parametrize(
    ("text", "host", "port", "loopback"),
    [
        ("127.0.0.1:8080", "127.0.0.1", 8080, True),
        (":8080", "127.0.0.1", 8080, True),
        ("[::1]:9000", "::1", 9000, True),
        ("localhost:0", "localhost", 0, True),
        ("127.3.4.5:1", "127.3.4.5", 1, True),
        ("0.0.0.0:8080", "0.0.0.0", 8080, False),  # noqa: S104 (the address under test)
        ("[::]:8080", "::", 8080, False),
        ("scheduler.internal:8080", "scheduler.internal", 8080, False),
    ],
)
def test_addresses_read_host_and_port_and_know_loopback(
    text: str, host: str, port: int, loopback: bool
) -> None:
    address = parse_address(text)
    assert (address.host, address.port, address.loopback) == (host, port, loopback)


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", ":70000", "::1:80", "a b:80"])
def test_addresses_that_are_not_host_and_port_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"host:port|brackets|neither"):
        parse_address(text)


def test_an_invalid_api_address_is_a_configuration_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="TRIGGERS_API_ADDRESS") as raised:
        load_settings(api_address="localhost:99999")
    assert raised.value.exit_code == errors.ExitCode.CONFIG
    assert load_settings(api_address="", api_token_file="").api_address is None


def test_token_files_hold_tokens_with_optional_names(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# rotated on 2026-12-01\n\n{GOOD}\nci-bot {'b' * 20}\n")
    tokens = read_tokens(path, variable="X", may_write=True)
    assert [(t.name, t.secret) for t in tokens] == [(None, GOOD.encode()), ("ci-bot", b"b" * 20)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no token"),
        ("# nothing\n", "holds no token"),
        ("short\n", "line 1 holds a token shorter than 16"),
        (f"{GOOD}\na b c\n", "line 2 is not TOKEN or NAME TOKEN"),
        (f"bad/name {GOOD}\n", "line 1 is not TOKEN or NAME TOKEN"),
    ],
)
def test_a_malformed_token_file_is_refused_without_showing_a_token(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as raised:
        read_tokens(path, variable="TRIGGERS_API_TOKEN_FILE", may_write=False)
    assert "TRIGGERS_API_TOKEN_FILE" in str(raised.value)
    assert GOOD not in str(raised.value)


def test_an_unreadable_token_file_names_its_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"TRIGGERS_API_TOKEN_FILE: cannot read .*missing"):
        read_tokens(tmp_path / "missing", variable="TRIGGERS_API_TOKEN_FILE", may_write=False)


def test_read_tokens_only_read_when_a_write_file_is_given_and_reload_replaces_them(
    tmp_path: Path,
) -> None:
    read, write = tmp_path / "read", tmp_path / "write"
    read.write_text(f"{GOOD}\n")
    write.write_text(f"deployer {'w' * 16}\n")
    tokens = Tokens(read, write)
    reader, writer = tokens.match(GOOD), tokens.match("w" * 16)
    assert reader is not None and not reader.may_write
    assert writer is not None and writer.may_write and writer.name == "deployer"
    assert tokens.match("x" * 16) is None and tokens.match("") is None
    assert tokens.match(GOOD + "x") is None

    read.write_text(f"{'n' * 16}\n")
    assert tokens.reload() == 2
    assert tokens.match(GOOD) is None and tokens.match("n" * 16) is not None
    read.write_text("short\n")
    with pytest.raises(ConfigError):
        tokens.reload()
    assert tokens.match("n" * 16) is not None  # a failed reload keeps the tokens in force

    only = tmp_path / "only"
    only.write_text(f"{GOOD}\n")
    alone = Tokens(only, None).match(GOOD)
    assert alone is not None and alone.may_write  # without a write file, a token may write


def test_the_api_needs_a_token_beyond_loopback_and_a_read_file_beside_a_write_one(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    token.write_text(f"{GOOD}\n")
    assert api_config(Settings()) is None
    local = api_config(Settings(api_address=":8080"))
    assert (
        local is not None
        and local.tokens is None
        and local.address == ListenAddress("127.0.0.1", 8080)
    )
    with pytest.raises(ConfigError, match="beyond loopback: set TRIGGERS_API_TOKEN_FILE"):
        api_config(Settings(api_address="0.0.0.0:8080"))
    public = api_config(Settings(api_address="0.0.0.0:8080", api_token_file=token))
    assert public is not None and public.tokens is not None
    with pytest.raises(ConfigError, match="TRIGGERS_API_WRITE_TOKEN_FILE is set without"):
        api_config(Settings(api_address=":8080", api_write_token_file=token))


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.UnknownTriggerError("x"), 404),
        (errors.UnknownRunError("x"), 404),
        (translated(looms.RunNotFoundError("x")), 404),
        (errors.InvalidTimeError("x"), 400),
        (errors.ScheduleError("x"), 400),
        (errors.UsageError("x"), 400),
        (translated(looms.InvalidRequestError("x")), 400),
        (errors.UnauthenticatedError("x"), 401),
        (errors.ForbiddenError("x"), 403),
        (translated(looms.EffectNotRetryableError("x")), 409),
        (translated(looms.SignalConflictError("x")), 409),
        (errors.RevisionMismatchError("x"), 409),
        (errors.StoreUnavailableError("x"), 503),
        (translated(looms.DatabaseUnavailableError("x")), 503),
        (translated(looms.RunOverloadedError("x")), 503),
        (translated(looms.RuntimeClosedError("x")), 503),
        (errors.StoreError("x"), 500),
        (translated(looms.CorruptHistoryError("x")), 500),
    ],
    ids=lambda value: _name(value) if isinstance(value, Exception) else str(value),
)
def test_errors_are_answered_with_a_status_that_fits(error: Exception, status: int) -> None:
    assert status_of(error) == status
    body = error_body(error)["error"]
    assert body["code"] == error.code  # type: ignore[attr-defined]
    assert body["message"] == "x"


def _name(error: Exception) -> str:
    runtime_code = getattr(error, "details", {}).get("runtime_code")
    return f"{type(error).__name__}-{runtime_code}" if runtime_code else type(error).__name__


def test_a_runtime_error_that_missed_the_door_is_a_bug_answered_without_its_detail() -> None:
    error = looms.RunNotFoundError("no run 'secret'")

    assert status_of(error) == 500
    assert error_body(error)["error"]["code"] == "TRG-000"
    assert "secret" not in str(error_body(error))
