"""Errors as HTTP answers: the CLI's `{"error": {code, message, details}}`, with a status.

Bad input is a 4xx with the same code and message the CLI prints (`TRG-112`, 404,
"no trigger 'ghost'; known: ..."); a database that does not answer is a 503 worth
retrying; anything unexpected is a 500 saying only that it was logged. No answer
ever carries a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from looms_runtime import errors as looms
from triggers import errors
from triggers.errors import TriggersError

_NOT_FOUND = (errors.UnknownTriggerError, errors.UnknownRunError, looms.RunNotFoundError)
_CONFLICT = (
    errors.RevisionMismatchError,
    errors.StaleOwnerError,
    errors.WatermarkMovedError,
    errors.LedgerChangedError,
    errors.DuplicateOccurrenceError,
    errors.SignalRefusedError,
    looms.EffectNotRetryableError,
    looms.SignalConflictError,
    looms.StartConflictError,
)
_UNAVAILABLE = (
    errors.StoreUnavailableError,
    looms.DatabaseUnavailableError,
    looms.RunOverloadedError,
    looms.RuntimeClosedError,
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
    if isinstance(error, _UNAVAILABLE):
        return 503
    if isinstance(error, TriggersError) and error.exit_code == errors.ExitCode.BAD_INPUT:
        return 400
    if isinstance(error, looms.InvalidRequestError):
        return 400
    return 500


def error_body(error: Exception) -> dict[str, Any]:
    """The `{"error": ...}` document of a known error, as the CLI prints it under --json."""
    if isinstance(error, TriggersError):
        return {"error": error.to_dict()}
    details = getattr(error, "details", None)
    return {
        "error": {
            "code": getattr(error, "code", "LMS-000"),
            "message": str(error),
            "details": details if isinstance(details, dict) else {},
        }
    }


def is_known(error: Exception) -> bool:
    """Raised on purpose by `triggers` or the runtime (not a bug)."""
    return isinstance(error, TriggersError | looms.LoomsError)


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
