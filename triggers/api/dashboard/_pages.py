"""The dashboard's pages: overview, triggers, a trigger, a run, the audit log, status.

Every page needs a signed-in viewer when tokens are configured (else it sends the
browser to `/login`); a read-only viewer sees the same pages without their action
buttons. Errors are pages too: the error's message and code, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from triggers.api._context import ApiServices
from triggers.api._errors import is_known, status_of
from triggers.api.dashboard import _gather, _overview
from triggers.api.dashboard._picture import SPANS, timeline_svg
from triggers.api.dashboard._render import Viewer, page, to_login, viewer
from triggers.errors import InputError, UsageError
from triggers.waits import DECISIONS

log = structlog.get_logger()


class PageRoute(APIRoute):
    """A page whose failures are pages: a known error with its status, a bug a 500
    whose detail goes to the log only."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException:
                raise
            except RequestValidationError as exc:
                problems = "; ".join(str(p.get("msg", "invalid")) for p in exc.errors())
                return error_page(request, UsageError(f"bad request: {problems}"), 400)
            except Exception as exc:  # the dashboard's boundary: every error is a page
                if is_known(exc):
                    return error_page(request, exc, status_of(exc))
                log.error(
                    "dashboard_request_failed",
                    method=request.method,
                    path=request.url.path,
                    exc_info=exc,
                )
                return error_page(request, None, 500)

        return guarded


def error_page(request: Request, error: Exception | None, status: int) -> Response:
    """An error as a page: what went wrong and its code (a bug: only that it was one)."""
    who = viewer(request)
    return page(
        request,
        "error.html",
        who,
        status=status,
        message=str(error) if error is not None else "the daemon failed to answer; see its log",
        code=getattr(error, "code", "TRG-000"),
    )


def not_found_page(request: Request) -> Response:
    """No page at this path."""
    return error_page(request, UsageError(f"no such page: {request.url.path}"), 404)


pages = APIRouter(route_class=PageRoute, include_in_schema=False)


def _ctx(request: Request) -> ApiServices:
    services: ApiServices = request.app.state.services
    return services


def _signed_in(request: Request) -> Viewer | Response:
    who = viewer(request)
    if who.caller is None:
        return to_login(request, who)
    return who


@pages.get("/")
def overview(request: Request) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    ctx = _ctx(request)
    with ctx.store.reading():
        doc = _overview.overview(ctx)
    return page(request, "overview.html", who, doc=doc)


@pages.get("/triggers")
def triggers(
    request: Request,
    q: Annotated[str, Query(max_length=200)] = "",
    state: Annotated[str, Query(max_length=20)] = "all",
    after: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    listed = next((known for known in _gather.STATES if known == state), None)
    if listed is None:
        raise InputError(f"unknown state {state!r}; one of: {', '.join(_gather.STATES)}")
    chosen = _gather.ListFilter(search=q.strip(), state=listed, after=after or None)
    found = _gather.trigger_list(_ctx(request), chosen)
    return page(request, "triggers.html", who, doc=found, chosen=chosen, states=_gather.STATES)


@pages.get("/triggers/{trigger_id}")
def trigger(
    request: Request,
    trigger_id: str,
    outcome: Annotated[list[str] | None, Query()] = None,
    since: Annotated[str | None, Query(max_length=100)] = None,
    until: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    span: Annotated[str, Query(max_length=4)] = "1d",
) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    if span not in SPANS:
        raise InputError(f"unknown span {span!r}; one of: {', '.join(SPANS)}")
    ctx = _ctx(request)
    outcomes = [o for o in outcome or [] if o]
    with ctx.store.reading():  # the page's dozen reads: one transaction
        doc = _gather.trigger_page(
            ctx,
            trigger_id,
            outcomes=outcomes,
            since=since or None,
            until=until or None,
            limit=limit,
        )
        picture = timeline_svg(ctx, trigger_id, span)
    return page(
        request,
        "trigger.html",
        who,
        doc=doc,
        picture=picture,
        span=span,
        spans=list(SPANS),
        filters={"outcome": outcomes, "since": since or "", "until": until or "", "limit": limit},
        outcomes=[
            "completed",
            "failed",
            "cancelled",
            "superseded",
            "skipped",
            "missed",
            "buffered",
            "launched",
            "launching",
        ],
    )


@pages.get("/runs/{run_id}")
def run(request: Request, run_id: str) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    ctx = _ctx(request)
    with ctx.store.reading():
        doc = _gather.run_page(ctx, run_id)
    return page(request, "run.html", who, doc=doc, decisions=DECISIONS)


@pages.get("/audit")
def audit(
    request: Request,
    trigger: Annotated[str | None, Query(max_length=200)] = None,
    run: Annotated[str | None, Query(max_length=200)] = None,
    action: Annotated[list[str] | None, Query()] = None,
    since: Annotated[str | None, Query(max_length=100)] = None,
    until: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    actions = [a for a in action or [] if a]
    entries = _gather.audit_page(
        _ctx(request),
        trigger_id=trigger or None,
        run_id=run or None,
        actions=actions,
        since=since or None,
        until=until or None,
        limit=limit,
    )
    filters = {
        "trigger": trigger or "",
        "run": run or "",
        "action": actions,
        "since": since or "",
        "until": until or "",
        "limit": limit,
    }
    from triggers.store.audit_log import ActionKind  # noqa: PLC0415

    return page(
        request,
        "audit.html",
        who,
        entries=entries,
        filters=filters,
        kinds=[kind.value for kind in ActionKind],
    )


@pages.get("/status")
def status(request: Request) -> Response:
    who = _signed_in(request)
    if isinstance(who, Response):
        return who
    return page(request, "status.html", who, doc=_gather.status_page(_ctx(request)))
