"""Secrets of command steps: read when an attempt starts, never stored, redacted.

A step's `secrets` map variable names to a file (`{"file": PATH}`) or to a systemd
credential (`{"credential": NAME}`, the file NAME in `$CREDENTIALS_DIRECTORY`, as
`LoadCredential=` provides). The values travel to the supervisor on its socket in
the command's environment only; the output tails and the error recorded for the
attempt have every value replaced by `[secret NAME]`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from looms_runtime._history.definitions import CommandStep

MAX_SECRET_BYTES = 65536
"""A secret is a password or a key, not a file to carry in an environment."""


class SecretUnavailableError(Exception):
    """A secret's file cannot be read: the attempt fails without starting."""


def read_secrets(step: CommandStep) -> dict[str, str]:
    """Each secret's value (its file's text, without a trailing newline).

    Raises:
        SecretUnavailableError: a file is missing, unreadable, too large or not UTF-8,
            or a credential is named while no `$CREDENTIALS_DIRECTORY` is set.
    """
    values: dict[str, str] = {}
    for name, source in step.secrets.items():
        path = _path_of(name, source)
        try:
            with path.open("rb") as stream:
                data = stream.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise SecretUnavailableError(
                f"cannot read the secret {name} ({path}): {reason}"
            ) from None
        if len(data) > MAX_SECRET_BYTES:
            raise SecretUnavailableError(
                f"the secret {name} ({path}) is over {MAX_SECRET_BYTES} bytes"
            )
        try:
            values[name] = data.decode().removesuffix("\n")
        except UnicodeDecodeError:
            raise SecretUnavailableError(f"the secret {name} ({path}) is not UTF-8 text") from None
    return values


def _path_of(name: str, source: Mapping[str, str]) -> Path:
    if "file" in source:
        return Path(source["file"])
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise SecretUnavailableError(
            f"the secret {name} names the credential {source['credential']!r}, but no "
            "$CREDENTIALS_DIRECTORY is set (systemd's LoadCredential= sets it)"
        )
    return Path(directory) / source["credential"]


def redacted(value: Any, secrets: Mapping[str, str]) -> Any:
    """`value` (strings, lists and mappings of them) with every secret replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        # The longest first: a secret that contains another is replaced whole.
        for name, secret in sorted(secrets.items(), key=lambda item: -len(item[1])):
            if secret:
                value = value.replace(secret, f"[secret {name}]")
        return value
    if isinstance(value, Mapping):
        return {key: redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [redacted(item, secrets) for item in value]
    return value
