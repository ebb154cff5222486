"""The daemon's HTTP API under `/api/v1/` (FastAPI on uvicorn), when `TRIGGERS_API_ADDRESS`
is set: the CLI's queries and operations, with its arguments, documents and error codes.

Imported only by a daemon that serves it: the CLI and a daemon without the API never
load the web framework, and a daemon that serves it binds its socket (`ApiServer`)
before the framework loads, which is after the scheduler's first tick has started.
docs/api.md is the reference.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triggers.api._access import ApiConfig, Caller, Tokens, api_config
    from triggers.api._app import build_app
    from triggers.api._context import ApiServices
    from triggers.api._server import ApiServer

__all__ = ["ApiConfig", "ApiServer", "ApiServices", "Caller", "Tokens", "api_config", "build_app"]

_HOMES = {
    "ApiConfig": "_access",
    "Caller": "_access",
    "Tokens": "_access",
    "api_config": "_access",
    "build_app": "_app",
    "ApiServices": "_context",
    "ApiServer": "_server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = found  # found once: later reads do not come here
    return found


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
