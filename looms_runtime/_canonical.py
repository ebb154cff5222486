"""Canonical JSON, the digests built on it, and run ids."""

from __future__ import annotations

import hashlib
import json
import os
import random
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from looms_runtime.errors import InvalidRequestError

# Run ids need uniqueness, not secrecy: a PRNG seeded from the OS is enough, and a
# system call per id is not (it was a tenth of a 1000-run start batch).
_RANDOM = random.Random(os.urandom(32))  # noqa: S311 (ids, not secrets)


def _refuse(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder, made once: `JSONEncoder.encode` builds a new one on every call,
# which was most of the cost of encoding the small values of a start request. No
# circular-reference markers: a cycle ends in RecursionError, refused below as well.
_ENCODE: Any = (
    c_make_encoder(None, _refuse, encode_basestring_ascii, None, ":", ",", True, False, False)
    if c_make_encoder is not None
    else json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).iterencode
)


def canonical_json(value: object) -> str:
    """The one text of a JSON value: sorted keys, no spaces, no NaN.

    Raises:
        InvalidRequestError: the value is not JSON (a set, an object, NaN, ...).
    """
    try:
        return "".join(_ENCODE(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"not a JSON value: {exc}") from exc


def json_text(value: str) -> str:
    """The JSON text of a string, exactly as `canonical_json` writes it."""
    return encode_basestring_ascii(value)


def digest(value: object) -> str:
    """The full sha256 hex digest of a value's canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def definition_version(definition: object) -> str:
    """A flow definition's version: the first 16 hex chars of its canonical digest.

    The daemon computes the same digest over the same canonical text, so the version
    it records with a trigger is the version the runtime stores the definition under.
    """
    return digest(definition)[:16]


def json_copy(value: object) -> Any:
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
    stamp = f"{now_ms & 0xFFFF_FFFF_FFFF:012x}"
    rand = _RANDOM.getrandbits(74)
    # version 7 in the top nibble of the 3rd group, variant 0b10 on top of the 4th
    low = (0b10 << 62) | (rand & 0x3FFF_FFFF_FFFF_FFFF)
    tail = f"{low:016x}"
    return f"{stamp[:8]}-{stamp[8:]}-7{rand >> 62:03x}-{tail[:4]}-{tail[4:]}"
