"""The API's router: every answer JSON, every error the CLI's error document, never a traceback."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, get_args, get_origin

import structlog
from fastapi import APIRouter, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from triggers.api._errors import (
    RETRY_AFTER_S,
    encode,
    error_body,
    internal_body,
    is_known,
    status_of,
)
from triggers.api._schemas import ErrorDocument
from triggers.errors import UsageError

log = structlog.get_logger()
PREFIX = "/api/v1"


class Json(Response):
    """A JSON answer, encoded as the CLI encodes its documents."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return encode(content)


def error_response(error: Exception, status: int | None = None) -> Json:
    """The answer to a known error: its document, the status that fits it."""
    code = status or status_of(error)
    headers = {}
    if code == 401:  # noqa: PLR2004 (HTTP's own numbers)
        headers["WWW-Authenticate"] = 'Bearer realm="triggers"'
    elif code == 503:  # noqa: PLR2004
        headers["Retry-After"] = str(RETRY_AFTER_S)
    return Json(error_body(error), status_code=code, headers=headers)


def validation_response(exc: RequestValidationError) -> Json:
    """A request whose parameters or body do not parse: a usage error, as on the CLI."""
    problems = []
    for problem in exc.errors():
        where = [str(part) for part in problem.get("loc", ())]
        origin, name = (where[0], ".".join(where[1:])) if where else ("request", "")
        message = str(problem.get("msg", "invalid"))
        if origin == "body" and not name:
            problems.append(f"the body: {message}")
        else:
            problems.append(f"invalid value for {name or origin!r} ({origin}): {message}")
    return error_response(UsageError("; ".join(problems), problems=problems), 400)


class ApiRoute(APIRoute):
    """A route whose failures all end in an error document: known errors with their
    status, a bug as a 500 whose detail goes to the log only."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        known, repeatable = _query_names(self.dependant)

        async def guarded(request: Request) -> Response:
            refused = _misused_query(request, known, repeatable)
            if refused is not None:
                return error_response(refused, 400)
            try:
                return await handler(request)
            except HTTPException:
                raise
            except RequestValidationError as exc:
                return validation_response(exc)
            except Exception as exc:  # the API's boundary: every error becomes an answer
                if is_known(exc):
                    return error_response(exc)
                log.error(
                    "api_request_failed",
                    method=request.method,
                    path=request.url.path,
                    exc_info=exc,
                )
                return Json(internal_body(), status_code=500)

        return guarded


def _query_names(dependant: Dependant) -> tuple[list[str], set[str]]:
    """The query parameters a route takes, and those of them that may repeat (lists)."""
    names, repeatable = set(), set()
    for param in dependant.query_params:
        names.add(param.alias)
        annotation = param.field_info.annotation
        if list in (get_origin(annotation), *(get_origin(arg) for arg in get_args(annotation))):
            repeatable.add(param.alias)
    for inner in dependant.dependencies:
        more, also = _query_names(inner)
        names.update(more)
        repeatable |= also
    return sorted(names), repeatable


def _misused_query(request: Request, known: list[str], repeatable: set[str]) -> UsageError | None:
    """An unknown query parameter, or one given twice that takes one value, or one with a
    NUL character: refused, as the CLI refuses an unknown option (a misspelt filter must
    not be ignored)."""
    if "\x00" in request.url.path:
        return UsageError("the path holds a NUL character (0x00)", path=request.url.path)
    given = request.query_params
    for name, value in given.multi_items():
        if "\x00" in name or "\x00" in value:
            # No stored text holds one (PostgreSQL's text cannot), so it names nothing.
            return UsageError(
                f"query parameter {name!r} holds a NUL character (0x00)", parameter=name
            )
    for name, value in given.multi_items():
        if name in known and not value:
            # `since=` names no time and `step=` no step: refused, never read as "any".
            return UsageError(f"query parameter {name!r} is empty", parameter=name)
    for name in given:
        if name not in known:
            return UsageError(
                f"unknown query parameter {name!r}; "
                + (f"known: {', '.join(known)}" if known else "this takes none"),
                parameter=name,
            )
        if name not in repeatable and len(given.getlist(name)) > 1:
            return UsageError(f"query parameter {name!r} takes one value", parameter=name)
    return None


_ERROR = {"model": ErrorDocument}
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "Bad input (TRG-116 for parameters that do not parse)."},
    401: {**_ERROR, "description": "No bearer token, or an unknown one (TRG-601)."},
    404: {**_ERROR, "description": "No such trigger or run (TRG-112, TRG-115, LMS-403)."},
    503: {**_ERROR, "description": "The database or the runtime is busy or unreachable."},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {**_ERROR, "description": "The token may only read (TRG-602)."},
    409: {**_ERROR, "description": "A conflict with the state (a signal key reused, ...)."},
}

router = APIRouter(prefix=PREFIX, route_class=ApiRoute, responses=ERRORS)
