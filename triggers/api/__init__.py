"""The daemon's HTTP API under `/api/v1/` (FastAPI on uvicorn), when `TRIGGERS_API_ADDRESS`
is set: the CLI's queries and operations, with its arguments, documents and error codes.

Imported only by a daemon that serves it: the CLI and a daemon without the API never
load the web framework. docs/api.md is the reference.
"""

from triggers.api._access import ApiConfig, Caller, Tokens, api_config
from triggers.api._app import build_app
from triggers.api._context import ApiServices
from triggers.api._server import ApiServer

__all__ = ["ApiConfig", "ApiServer", "ApiServices", "Caller", "Tokens", "api_config", "build_app"]
