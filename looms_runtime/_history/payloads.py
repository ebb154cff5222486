"""Readers of the optional fields of an event's payload (absent or null: None)."""

from __future__ import annotations

from typing import Any


def opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def opt_marker(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    return {str(key): str(item) for key, item in dict(value).items()}
