"""Errors as HTTP answers: the CLI's `{"error": {code, message, details}}`, with a status.

Bad input is a 4xx with the same code and message the CLI prints (`TRG-112`, 404,
"no trigger 'ghost'; known: ..."); a database that does not answer is a 503 worth
retrying; anything unexpected is a 500 saying only that it was logged. No answer
ever carries a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from triggers import errors
from triggers.errors import TriggersError

_NOT_FOUND = (errors.UnknownTriggerError, errors.UnknownRunError)
_CONFLICT = (
    errors.RevisionMismatchError,
    errors.StaleOwnerError,
    errors.WatermarkMovedError,
    errors.LedgerChangedError,
    errors.DuplicateOccurrenceError,
    errors.RunConflictError,
    errors.RunnerRefusedError,
)
RETRY_AFTER_S = 1


def status_of(error: Exception) -> int:
    """The HTTP status that answers `error` (raised by an operation)."""
    if isinstance(error, errors.UnauthenticatedError):
        return 401
    if isinstance(error, errors.ForbiddenError):
        return 403
    if isinstance(error, _NOT_FOUND):
        return 404
    if isinstance(error, _CONFLICT):
        return 409
    if not isinstance(error, TriggersError):
        return 500
    if error.exit_code == errors.ExitCode.TEMPORARY:
        return 503  # the CLI's exit 75 (the database, a busy or closing runtime): retry
    if error.exit_code == errors.ExitCode.BAD_INPUT:
        return 400
    return 500


def error_body(error: Exception) -> dict[str, Any]:
    """The `{"error": ...}` document of a known error, as the CLI prints it under --json."""
    if isinstance(error, TriggersError):
        return {"error": error.to_dict()}
    return internal_body()


def is_known(error: Exception) -> bool:
    """Raised on purpose by `triggers` (not a bug); the runtime's errors reach the API
    translated (`triggers.runner.door`)."""
    return isinstance(error, TriggersError)


def internal_body() -> dict[str, Any]:
    """What a bug answers: no detail of it, which the daemon logs (`api_request_failed`)."""
    return {
        "error": {
            "code": "TRG-000",
            "message": "internal error; the daemon logged it (event api_request_failed)",
            "details": {},
        }
    }


def encode(document: Any) -> bytes:
    """A document as the API sends it: compact JSON, as the CLI's values (`default=str`)."""
    return json.dumps(document, default=str, separators=(",", ":"), ensure_ascii=False).encode()
