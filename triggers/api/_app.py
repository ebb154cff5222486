"""The ASGI application: the routes under `/api/v1/` and the probes, its OpenAPI document,
its guards."""

from __future__ import annotations

import time
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from triggers import __version__
from triggers.api import _runs, _triggers
from triggers.api._access import ApiConfig
from triggers.api._context import ApiServices, Reader
from triggers.api._errors import encode, internal_body
from triggers.api._probes import probes
from triggers.api._routing import PREFIX, ApiRoute, Json, error_response, router
from triggers.errors import UsageError

log = structlog.get_logger()
MAX_BODY_BYTES = 1024 * 1024
"""A larger request body is refused (413): a signal's payload is data, not a file."""
_ROUTES = (_runs, _triggers)  # importing them registers their endpoints on `router`

DESCRIPTION = """\
The `triggers` daemon's HTTP API: the CLI's queries and operations, with the same
arguments, the same JSON documents as its `--json` and the same error codes
(docs/api.md, docs/catalogue.md). Every request needs a bearer token of
`TRIGGERS_API_TOKEN_FILE`, but the probes `/healthz` and `/readyz`; changes need one
of `TRIGGERS_API_WRITE_TOKEN_FILE` when that is set. Instants are RFC 3339 UTC with
`Z`.
"""


def build_app(services: ApiServices, config: ApiConfig) -> FastAPI:
    """The API over the daemon's store, audit log and runtime."""
    app = FastAPI(
        title="triggers",
        version=__version__,
        description=DESCRIPTION,
        openapi_url=None,  # served below, behind the same token as everything else
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    app.state.config = config
    app.include_router(router)
    app.include_router(probes)
    document = APIRouter(prefix=PREFIX, route_class=ApiRoute)

    @document.get("/openapi.json", include_in_schema=False)
    def openapi(_caller: Reader) -> Json:
        return Json(_document(app))

    app.include_router(document)
    from triggers.api import dashboard  # noqa: PLC0415 (its templates load with it)

    dashboard.mount(app)
    app.add_exception_handler(HTTPException, _http_error)
    # The last resort, past every route's own guard (a bug in a middleware).
    app.add_exception_handler(Exception, _bug)
    app.add_middleware(_Guard)
    return app


def _document(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        # Parameters that do not parse are answered 400 with the CLI's usage error,
        # never FastAPI's 422: drop what it documents for them.
        for path in document.get("paths", {}).values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
                for parameter in operation.get("parameters", []):
                    _without_nul(parameter.get("schema", {}))
        schemas = document.get("components", {}).get("schemas", {})
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        app.openapi_schema = document
    return app.openapi_schema


NO_NUL = "^[^\u0000]*$"
"""Text parameters hold no NUL character (0x00): no stored text can (PostgreSQL's
cannot), and a request with one is refused (400)."""


def _without_nul(schema: dict[str, Any]) -> None:
    """Document `NO_NUL` and a length of at least one on a parameter's text (its
    schema, or its list's items)."""
    for part in (schema, schema.get("items", {}), *schema.get("anyOf", [])):
        if part.get("type") == "string" and not {"pattern", "enum", "format"} & part.keys():
            part["pattern"] = NO_NUL
        if part.get("type") == "string":
            part.setdefault("minLength", 1)  # an empty value is refused (400), as documented
        if part is not schema and part.get("type") == "array":
            _without_nul(part)


async def _http_error(request: Request, exc: Exception) -> Response:
    """No such endpoint (404), or not with this method (405): a usage error (a page
    outside the API's prefix)."""
    assert isinstance(exc, HTTPException)  # noqa: S101 (registered for that class only)
    if not request.url.path.startswith(PREFIX + "/") and exc.status_code == 404:  # noqa: PLR2004
        from triggers.api.dashboard import not_found_page  # noqa: PLC0415

        return not_found_page(request)
    if exc.status_code == 404:  # noqa: PLR2004
        message = (
            f"no such endpoint: {request.method} {request.url.path} (see {PREFIX}/openapi.json)"
        )
    elif exc.status_code == 405:  # noqa: PLR2004
        message = f"{request.url.path} does not take {request.method}"
    else:
        message = str(exc.detail)
    answer = error_response(UsageError(message, path=request.url.path), exc.status_code)
    # A 405 says which methods the path takes (RFC 9110 §15.5.6): Starlette's `Allow`.
    for name, value in (exc.headers or {}).items():
        if name.lower() == "allow":
            answer.headers["Allow"] = value
    return answer


async def _bug(request: Request, exc: Exception) -> Json:
    log.error("api_request_failed", method=request.method, path=request.url.path, exc_info=exc)
    return Json(internal_body(), status_code=500)


class _Guard:
    """Refuses bodies over `MAX_BODY_BYTES` and logs every request at debug level."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 0}
        length = dict(scope.get("headers") or []).get(b"content-length", b"0")
        # A malformed length never gets here: the HTTP parser refuses it first.
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            await _too_large(send)
            status["code"] = 413
        else:
            over = {"passed": False}

            async def sent(message: Message) -> None:
                if over["passed"]:
                    # A body sent in chunks passed the limit: whatever the route made
                    # of the refusal, the answer is a 413, as with a declared length.
                    if message["type"] == "http.response.start":
                        status["code"] = 413
                        await _too_large(send)
                    return
                if message["type"] == "http.response.start":
                    status["code"] = int(message["status"])
                await send(message)

            await self._app(scope, _bounded(receive, over), sent)
        log.debug(
            "api_request_served",
            method=scope.get("method"),
            path=scope.get("path"),
            status=status["code"],
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )


def _bounded(receive: Receive, over: dict[str, bool]) -> Receive:
    """`receive`, refusing a body (sent in chunks, without a length) past the limit;
    `over["passed"]` says it was."""
    seen = {"bytes": 0}

    async def bounded() -> Message:
        message = await receive()
        if message["type"] == "http.request":
            seen["bytes"] += len(message.get("body", b""))
            if seen["bytes"] > MAX_BODY_BYTES:
                over["passed"] = True
                raise UsageError(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        return message

    return bounded


async def _too_large(send: Send) -> None:
    body = encode(
        {
            "error": {
                "code": UsageError.code,
                "message": f"the request body is larger than {MAX_BODY_BYTES} bytes",
                "details": {},
            }
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
