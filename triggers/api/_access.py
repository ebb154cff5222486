"""Who may call the API: bearer tokens read from files, compared in constant time.

`TRIGGERS_API_TOKEN_FILE` holds the tokens every request needs; with
`TRIGGERS_API_WRITE_TOKEN_FILE` too, those only read and the write file's tokens
may also change things (fire, pause, resume, a run's cancel, retry or signal).
A token file holds one token a line, optionally after a name (`ci 3f9a...`): the
name is the caller the audit log records (`api:ci`); blank lines and `#` comments
are ignored. Tokens are never logged; a token file is read at start and on SIGHUP.
Without any token file the API listens on loopback only, and any local process may
call it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triggers.addresses import ListenAddress, parse_address
from triggers.errors import ConfigError
from triggers.settings import Settings
from triggers.store.audit_log import Actor

MIN_TOKEN_LENGTH = 16
"""Shorter tokens are refused: `openssl rand -hex 32` makes a good one."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_TOKEN_VARIABLE = "TRIGGERS_API_TOKEN_FILE"  # noqa: S105 (a variable name, no secret)
_WRITE_VARIABLE = "TRIGGERS_API_WRITE_TOKEN_FILE"


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller: the token's name, whether it may write, its address."""

    name: str | None
    may_write: bool
    address: str

    def actor(self) -> Actor:
        """The caller as the audit log records it: `api` (or `api:NAME`) at its address."""
        return Actor(host=self.address, user="api" if self.name is None else f"api:{self.name}")


@dataclass(frozen=True, slots=True)
class _Token:
    name: str | None
    secret: bytes
    may_write: bool


def read_tokens(path: Path, *, variable: str, may_write: bool) -> list[_Token]:
    """The tokens of one file. Raises ConfigError naming the variable and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{variable}: cannot read {path}: {reason}", variable=variable) from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2 or (len(words) == 2 and not _NAME.fullmatch(words[0])):  # noqa: PLR2004
            raise ConfigError(
                f"{variable}: {path} line {number} is not TOKEN or NAME TOKEN "
                "(a name of letters, digits and ._@-)",
                variable=variable,
            )
        secret = words[-1]
        if len(secret) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"{variable}: {path} line {number} holds a token shorter than "
                f"{MIN_TOKEN_LENGTH} characters; make one with `openssl rand -hex 32`",
                variable=variable,
            )
        name = words[0] if len(words) == 2 else None  # noqa: PLR2004
        tokens.append(_Token(name=name, secret=secret.encode(), may_write=may_write))
    if not tokens:
        raise ConfigError(f"{variable}: {path} holds no token", variable=variable)
    return tokens


class Tokens:
    """The tokens in force, replaced whole on reload."""

    def __init__(self, token_file: Path, write_token_file: Path | None) -> None:
        self._files = (token_file, write_token_file)
        self._lock = threading.Lock()
        self._tokens = self._read()

    def _read(self) -> Sequence[_Token]:
        token_file, write_file = self._files
        if write_file is None:
            return read_tokens(token_file, variable=_TOKEN_VARIABLE, may_write=True)
        return [
            *read_tokens(token_file, variable=_TOKEN_VARIABLE, may_write=False),
            *read_tokens(write_file, variable=_WRITE_VARIABLE, may_write=True),
        ]

    def reload(self) -> int:
        """Read the files again; returns how many tokens are in force.

        Raises:
            ConfigError: a file cannot be read or is malformed (the old tokens stay).
        """
        tokens = self._read()
        with self._lock:
            self._tokens = tokens
        return len(tokens)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._tokens)

    def match(self, presented: str) -> _Token | None:
        """The token `presented` is, compared with every token in constant time."""
        given = presented.encode()
        with self._lock:
            tokens = self._tokens
        found = None
        for token in tokens:
            # Every token is compared, the match or not, so timing tells nothing.
            if hmac.compare_digest(given, token.secret) and found is None:
                found = token
        return found

    def by_digest(self, digest: str) -> _Token | None:
        """The token in force whose SHA-256 (hex) is `digest`: a dashboard session keeps
        the digest, never the token, and ends when its token is no longer in force."""
        wanted = digest.encode()
        with self._lock:
            tokens = self._tokens
        found = None
        for token in tokens:
            mine = hashlib.sha256(token.secret).hexdigest().encode()
            if hmac.compare_digest(wanted, mine) and found is None:
                found = token
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiConfig:
    """Where the API listens and who may call it."""

    address: ListenAddress
    tokens: Tokens | None
    """None: no token file; then the address is loopback and every local caller may act."""


def api_config(settings: Settings) -> ApiConfig | None:
    """The API's configuration (None when `TRIGGERS_API_ADDRESS` is not set).

    Raises:
        ConfigError: a token file is unreadable or malformed, a write token file is
            given without a token file, or the address is beyond loopback without a token.
    """
    if settings.api_address is None:
        return None
    address = parse_address(settings.api_address)  # valid: the settings checked it
    token_file, write_file = settings.api_token_file, settings.api_write_token_file
    if write_file is not None and token_file is None:
        raise ConfigError(
            f"{_WRITE_VARIABLE} is set without {_TOKEN_VARIABLE}: set both "
            "(the tokens that read, and those that may also write)",
            variable=_WRITE_VARIABLE,
        )
    if token_file is None:
        if not address.loopback:
            raise ConfigError(
                f"TRIGGERS_API_ADDRESS={settings.api_address} listens beyond loopback: "
                f"set {_TOKEN_VARIABLE} to a file holding a bearer token, or listen on "
                "127.0.0.1",
                variable="TRIGGERS_API_ADDRESS",
            )
        return ApiConfig(address=address, tokens=None)
    return ApiConfig(address=address, tokens=Tokens(token_file, write_file))
