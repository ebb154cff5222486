"""What an effect attempt gets from its run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectContext:
    """One attempt of one effect of one run."""

    run_id: str
    effect_id: str
    step_id: str
    attempt: int
    input: Any
    input_json: str
    run_env: Mapping[str, str]
    env_prefix: str
    output_limit_bytes: int
