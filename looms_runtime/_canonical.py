"""Canonical JSON, the digests built on it, and run ids."""

from __future__ import annotations

import hashlib
import json
import os
import random
from typing import Any

from looms_runtime.errors import InvalidRequestError

# Run ids need uniqueness, not secrecy: a PRNG seeded from the OS is enough, and a
# system call per id is not (it was a tenth of a 1000-run start batch).
_RANDOM = random.Random(os.urandom(32))  # noqa: S311 (ids, not secrets)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical_json(value: Any) -> str:
    """The one text of a JSON value: sorted keys, no spaces, no NaN.

    Raises:
        InvalidRequestError: the value is not JSON (a set, an object, NaN, ...).
    """
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"not a JSON value: {exc}") from exc


def digest(value: Any) -> str:
    """The full sha256 hex digest of a value's canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def definition_version(definition: Any) -> str:
    """A flow definition's version: the first 16 hex chars of its canonical digest.

    The daemon computes the same digest over the same canonical text, so the version
    it records with a trigger is the version the runtime stores the definition under.
    """
    return digest(definition)[:16]


def json_copy(value: Any) -> Any:
    """A deep copy through JSON, so a stored value cannot change under its digest."""
    return json.loads(canonical_json(value))


def text_digest(*parts: str) -> str:
    """The sha256 hex digest of texts, joined unambiguously.

    The parts are names and canonical JSON, neither of which holds a raw line feed
    (JSON escapes it), so joining on one cannot make two lists collide.
    """
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def new_run_id(now_ms: int) -> str:
    """A time-ordered UUIDv7 string (48-bit millisecond prefix, 74 random bits).

    Time order keeps new runs at the right end of the primary-key index.
    """
    rand = _RANDOM.getrandbits(80)
    value = (now_ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
