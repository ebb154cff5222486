"""What an effect attempt reports back to its run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectResult:
    """The outcome of one attempt.

    Attributes:
        ok: the attempt succeeded.
        output: JSON recorded with the outcome (exit code and output tails, a return value).
        error: why the attempt failed; None when it succeeded.
        cancelled: the attempt was stopped because its run is being cancelled.
        retryable: False when the failure must not be retried (whatever the policy).
        ambiguous: whether the attempt ran cannot be known (its supervisor stopped
            without recording an outcome): the step is ambiguous, as after a crash.
    """

    effect_id: str
    attempt: int
    ok: bool
    output: Any = None
    error: str | None = None
    cancelled: bool = False
    retryable: bool = True
    ambiguous: bool = False
