"""Errors of `triggers`, each with a stable code and the exit code the CLI maps it to.

Class tree (codes never renumbered or reused)::

    TriggersError                     TRG-000  exit 1
    ├── ConfigError                   TRG-100  exit 78  invalid settings
    │   ├── SchemaBehindError         TRG-101  exit 78  database schema older than this release
    │   └── DatabaseMissingError      TRG-102  exit 78  no database, or no schema in it, yet
    ├── InputError                    TRG-110  exit 2   bad input
    │   ├── DeclarationError          TRG-111  exit 2   a declarations file failed validation
    │   ├── UnknownTriggerError       TRG-112  exit 2   no trigger with that id
    │   ├── InvalidTimeError          TRG-113  exit 2   an unparseable or out-of-range time
    │   ├── BackfillTooLargeError     TRG-114  exit 2   a backfill range above the cap
    │   ├── UnknownRunError           TRG-115  exit 2   no run with that id
    │   ├── UsageError                TRG-116  exit 2   a command line that does not parse
    │   ├── OutputFileError           TRG-117  exit 2   a picture file that cannot be written
    │   ├── RunRequestError           TRG-118  exit 2   a request about runs that can never succeed
    │   └── RunConflictError          TRG-119  exit 2   a request about a run that its state refuses
    ├── ScheduleError                 TRG-200  exit 2   a cron expression or time zone is invalid
    ├── StoreError                    TRG-300  exit 1
    │   ├── StoreUnavailableError     TRG-301  exit 75  the database cannot be reached
    │   ├── RevisionMismatchError     TRG-302  exit 1   the declaration changed since it was read
    │   ├── StaleOwnerError           TRG-303  exit 1   a reservation expired or was taken over
    │   ├── CorruptRowError           TRG-304  exit 1   a stored row cannot be decoded
    │   ├── WatermarkMovedError       TRG-305  exit 1   another scheduler decided those occurrences
    │   ├── LedgerChangedError        TRG-306  exit 1   ledger rows moved under a backfill
    │   └── DuplicateOccurrenceError  TRG-307  exit 1   the ledger already holds that occurrence
    ├── RunnerError                   TRG-400  exit 1
    │   ├── RunnerTimeoutError        TRG-401  exit 1   a runner call missed its deadline
    │   ├── RunnerRefusedError        TRG-402  exit 1   the runtime refused a start for good
    │   └── RunnerUnavailableError    TRG-403  exit 75  the runtime is busy, closing or unreachable
    ├── DaemonError                   TRG-500  exit 1
    └── ApiAccessError                TRG-600  exit 2   an HTTP API request refused for its token
        ├── UnauthenticatedError      TRG-601  exit 2   no bearer token, or an unknown one (401)
        └── ForbiddenError            TRG-602  exit 2   a read-only token asked to write (403)
"""

from __future__ import annotations

import enum
from typing import ClassVar


class ExitCode(enum.IntEnum):
    """Process exit codes of the `triggers` CLI (sysexits-style where one fits)."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    ATTENTION = 3
    """`status`: no daemon is alive, or a run waits for an operator."""
    TEMPORARY = 75
    CONFIG = 78


class TriggersError(Exception):
    """Base of every error `triggers` raises on purpose."""

    code: ClassVar[str] = "TRG-000"
    exit_code: ClassVar[ExitCode] = ExitCode.FAILED

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details  # JSON-safe: ids, ISO instants, numbers

    def to_dict(self) -> dict[str, object]:
        """The `{"code", "message", "details"}` shape the CLI prints on stderr."""
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(TriggersError):
    """Settings are invalid; restarting will not help."""

    code = "TRG-100"
    exit_code = ExitCode.CONFIG


class SchemaBehindError(ConfigError):
    """The database schema is older than this release; `triggers db upgrade` fixes it."""

    code = "TRG-101"


class DatabaseMissingError(ConfigError):
    """The database, or the schema in it, does not exist yet: no daemon has used it.

    Commands that only read never create a database or migrate one; the daemon
    (`triggers run`), `triggers apply` and `triggers db upgrade` do."""

    code = "TRG-102"


class InputError(TriggersError):
    """The user's input (arguments, files, ids, times) is wrong."""

    code = "TRG-110"
    exit_code = ExitCode.BAD_INPUT


class DeclarationError(InputError):
    """A declarations file failed validation; `details["problems"]` lists every problem."""

    code = "TRG-111"


class UnknownTriggerError(InputError):
    """No trigger with that id is stored or declared."""

    code = "TRG-112"


class InvalidTimeError(InputError):
    """A time argument cannot be parsed or is out of range."""

    code = "TRG-113"


class BackfillTooLargeError(InputError):
    """A backfill range holds more occurrences than the cap allows."""

    code = "TRG-114"


class UnknownRunError(InputError):
    """No run with that id is known to the runtime."""

    code = "TRG-115"


class UsageError(InputError):
    """The command line does not parse: an unknown option, a missing argument."""

    code = "TRG-116"


class OutputFileError(InputError):
    """A picture file (`timeline --output FILE`) of an unknown kind or that cannot be written."""

    code = "TRG-117"


class RunRequestError(InputError):
    """A request about runs that can never succeed as given (an unknown status, a bad
    limit, a payload that is not JSON)."""

    code = "TRG-118"


class RunConflictError(InputError):
    """A request about a run that its state refuses: a retry of a step that is not
    stuck, a signal key reused with another payload (HTTP 409)."""

    code = "TRG-119"


class ScheduleError(TriggersError):
    """A schedule (cron expression, interval, time zone) is invalid."""

    code = "TRG-200"
    exit_code = ExitCode.BAD_INPUT


class StoreError(TriggersError):
    """The trigger store refused or failed an operation."""

    code = "TRG-300"


class StoreUnavailableError(StoreError):
    """The database cannot be reached or timed out; worth retrying."""

    code = "TRG-301"
    exit_code = ExitCode.TEMPORARY


class RevisionMismatchError(StoreError):
    """The trigger's declaration changed since the occurrence was computed (normal under edits)."""

    code = "TRG-302"


class StaleOwnerError(StoreError):
    """A reservation expired or was taken over by another scheduler (normal under contention)."""

    code = "TRG-303"


class CorruptRowError(StoreError):
    """A stored row cannot be decoded; the trigger it belongs to is skipped, not the tick."""

    code = "TRG-304"


class WatermarkMovedError(StoreError):
    """The watermark moved since the caller planned: those occurrences are decided."""

    code = "TRG-305"


class LedgerChangedError(StoreError):
    """Ledger rows a backfill planned from changed before it claimed; plan again."""

    code = "TRG-306"


class DuplicateOccurrenceError(StoreError):
    """The ledger already holds a row for that occurrence: a writer outside the fences
    (the watermark, the revision) recorded it. `details["constraint"]` names the key."""

    code = "TRG-307"


class RunnerError(TriggersError):
    """The runner (durable runtime) failed a start, inspect or cancel."""

    code = "TRG-400"


class RunnerTimeoutError(RunnerError):
    """A runner call missed its deadline; its outcome is unknown (ambiguous)."""

    code = "TRG-401"


class RunnerRefusedError(RunnerError):
    """The runtime refused a start for good (conflicting key, unknown flow): no retry helps."""

    code = "TRG-402"


class RunnerUnavailableError(RunnerError):
    """The runtime cannot take the request now: a run's queue of requests is full, the
    runtime is closing, or its database does not answer. Worth retrying (HTTP 503)."""

    code = "TRG-403"
    exit_code = ExitCode.TEMPORARY


class DaemonError(TriggersError):
    """The daemon cannot continue."""

    code = "TRG-500"


class ApiAccessError(TriggersError):
    """An HTTP API request was refused for its token (never a CLI exit: the API's own)."""

    code = "TRG-600"
    exit_code = ExitCode.BAD_INPUT


class UnauthenticatedError(ApiAccessError):
    """The request carries no bearer token, or one the daemon does not know (HTTP 401)."""

    code = "TRG-601"


class ForbiddenError(ApiAccessError):
    """The request's token may only read, and the request would change something (403)."""

    code = "TRG-602"
