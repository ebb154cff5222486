"""What the dashboard's forms post: sign-in, sign-out, and the operators' actions.

Every form carries its session's CSRF token (`csrf`); a post without it, or with
another session's, is refused (403) and changes nothing. An action is confirmed
first: its form posts without `confirm`, and the answer is a page saying what the
action will do, whose button posts it again with `confirm=yes`. Actions need a
token that may write; each is recorded in the audit log with the token's name as
the actor (`api:NAME`), as the API records its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

import structlog
from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool

from triggers import actions
from triggers.api._access import ApiConfig
from triggers.api._context import ApiServices
from triggers.api.dashboard._pages import PageRoute, error_page
from triggers.api.dashboard._render import HEADERS, Viewer, local_path, page, set_cookie, viewer
from triggers.api.dashboard._sessions import Sessions
from triggers.errors import InputError, UsageError

log = structlog.get_logger()
forms = APIRouter(route_class=PageRoute, include_in_schema=False)
_FORM = "application/x-www-form-urlencoded"
MAX_NOTE = 2000
"""Characters of a note at most (the audit log keeps it whole)."""


async def read_form(request: Request) -> dict[str, str]:
    """The posted fields (the first value of each). Raises UsageError for another body."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != _FORM:
        raise UsageError(f"a form posts {_FORM}, not {kind or 'nothing'}")
    text = (await request.body()).decode("utf-8", errors="replace")
    fields = parse_qs(text, keep_blank_values=True, max_num_fields=20)
    found = {name: values[0] for name, values in fields.items()}
    if any("\x00" in value for value in found.values()):
        raise UsageError("a field holds a NUL character (0x00)")
    return found


def _refused(request: Request, who: Viewer | None, reason: str) -> None:
    # Never a token: why the post was refused, and the token's name when signed in.
    log.info(
        "dashboard_request_refused",
        client=request.client.host if request.client else "unknown",
        method=request.method,
        path=request.url.path,
        reason=reason,
        token=who.caller.name if who and who.caller else None,
    )


def _csrf_refusal(request: Request, who: Viewer, fields: dict[str, str]) -> Response | None:
    """403 unless the form carries this session's CSRF token (and came from this site)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    foreign = origin is not None and origin.split("://", 1)[-1] != host
    if foreign or not who.session.csrf_matches(fields.get("csrf")):
        _refused(request, who, "cross-site origin" if foreign else "missing or wrong CSRF token")
        return error_page(
            request,
            UsageError(
                "this form has expired or was not sent by this dashboard: reload the page "
                "and try again"
            ),
            403,
        )
    return None


@forms.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:  # noqa: A002 (the field's name)
    who = viewer(request)
    return page(request, "login.html", who, next_path=local_path(next), problem=None)


@forms.post("/login")
async def login(request: Request) -> Response:
    who = viewer(request)
    fields = await read_form(request)
    refusal = _csrf_refusal(request, who, fields)
    if refusal is not None:
        return refusal
    config: ApiConfig = request.app.state.config
    next_path = local_path(fields.get("next"))
    if config.tokens is None:
        return _redirect(next_path)
    token = config.tokens.match(fields.get("token", "").strip())
    if token is None:
        _refused(request, who, "unknown token")
        return page(
            request,
            "login.html",
            who,
            status=401,
            next_path=next_path,
            problem="That token is not one of the daemon's API tokens.",
        )
    sessions: Sessions = request.app.state.sessions
    now = request.app.state.services.clock.now()
    session = sessions.sign_in(who.session, token=fields["token"].strip(), name=token.name, now=now)
    log.info("dashboard_signed_in", token=token.name, may_write=token.may_write)
    response = _redirect(next_path)
    set_cookie(request, response, session)
    return response


@forms.post("/logout")
async def logout(request: Request) -> Response:
    who = viewer(request)
    fields = await read_form(request)
    refusal = _csrf_refusal(request, who, fields)
    if refusal is not None:
        return refusal
    sessions: Sessions = request.app.state.sessions
    sessions.end(who.session.id)
    return _redirect("/login")


def _redirect(path: str) -> Response:
    response = RedirectResponse(path, status_code=303)
    response.headers.update(HEADERS)
    return response


Act = Callable[[ApiServices, Viewer, dict[str, str]], Any]


async def _action(
    request: Request,
    *,
    title: str,
    means: str,
    button: str,
    act: Act,
    back: str,
    done: str,
    keep: tuple[str, ...] = (),
) -> Response:
    """Check the viewer and the form, confirm, act, and go back to `back`."""
    who = viewer(request)
    if who.caller is None:
        _refused(request, who, "not signed in")
        return error_page(request, UsageError("sign in first (/login)"), 401)
    fields = await read_form(request)
    refusal = _csrf_refusal(request, who, fields)
    if refusal is not None:
        return refusal
    if not who.caller.may_write:
        _refused(request, who, "read-only token")
        return error_page(
            request,
            UsageError(
                "this token may only read; an action needs a token of TRIGGERS_API_WRITE_TOKEN_FILE"
            ),
            403,
        )
    note = fields.get("note", "").strip()
    if len(note) > MAX_NOTE:
        raise InputError(f"a note holds at most {MAX_NOTE} characters")
    if fields.get("confirm") != "yes":
        kept = {name: fields.get(name, "") for name in keep}
        return page(
            request,
            "confirm.html",
            who,
            title=title,
            means=means,
            button=button,
            action=request.url.path,
            back=back,
            kept=kept,
            note=note,
        )
    ctx: ApiServices = request.app.state.services
    await run_in_threadpool(act, ctx, who, fields | {"note": note})
    return _redirect(f"{back}?done={quote(done)}")


def _note(fields: dict[str, str]) -> str | None:
    return fields.get("note") or None


def _actor(who: Viewer) -> Any:
    assert who.caller is not None  # noqa: S101 (checked before any action)
    return who.caller.actor()


@forms.post("/triggers/{trigger_id}/fire")
async def fire(request: Request, trigger_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        actions.fire(
            ctx.store,
            ctx.audit,
            trigger_id,
            now=ctx.clock.now(),
            key=None,
            overlap=None,
            owner=ctx.owner,
            actor=_actor(who),
            note=_note(fields),
            host=ctx.host,
        )
        ctx.wake()

    return await _action(
        request,
        title=f"Fire {trigger_id} now?",
        means="One manual occurrence, launched at once; the trigger's overlap policy "
        "applies (a run still active may make it skip or wait).",
        button="Fire now",
        act=act,
        back=f"/triggers/{quote(trigger_id, safe='')}",
        done="fired",
    )


@forms.post("/triggers/{trigger_id}/pause")
async def pause(request: Request, trigger_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        actions.pause(
            ctx.store,
            ctx.audit,
            trigger_id,
            note=_note(fields),
            actor=_actor(who),
            now=ctx.clock.now(),
        )

    return await _action(
        request,
        title=f"Pause {trigger_id}?",
        means="No new occurrence is claimed until it is resumed (kept across applies); "
        "a run already going goes on. The note says why, in the audit log and on its page.",
        button="Pause",
        act=act,
        back=f"/triggers/{quote(trigger_id, safe='')}",
        done="paused",
    )


@forms.post("/triggers/{trigger_id}/resume")
async def resume(request: Request, trigger_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        actions.resume(
            ctx.store,
            ctx.audit,
            trigger_id,
            note=_note(fields),
            actor=_actor(who),
            now=ctx.clock.now(),
        )
        ctx.wake()

    return await _action(
        request,
        title=f"Resume {trigger_id}?",
        means="Claims start again from now; the occurrences of the paused period are "
        "recorded as skipped (reason `paused`), not launched.",
        button="Resume",
        act=act,
        back=f"/triggers/{quote(trigger_id, safe='')}",
        done="resumed",
    )


@forms.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        actions.cancel(
            ctx.runs,
            ctx.audit,
            run_id,
            reason=_note(fields),
            actor=_actor(who),
            now=ctx.clock.now(),
        )

    return await _action(
        request,
        title=f"Cancel run {run_id}?",
        means="A running command gets SIGTERM, then SIGKILL after a grace period; no "
        "step runs again, and the ledger records the run cancelled.",
        button="Cancel the run",
        act=act,
        back=f"/runs/{quote(run_id, safe='')}",
        done="cancelled",
    )


@forms.post("/runs/{run_id}/retry")
async def retry(request: Request, run_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        effect_id = fields.get("effect_id", "")
        if not effect_id:
            raise InputError("say which step to retry (effect_id)")
        actions.retry(
            ctx.runs,
            ctx.audit,
            run_id,
            effect_id,
            note=_note(fields),
            actor=_actor(who),
            now=ctx.clock.now(),
        )

    return await _action(
        request,
        title=f"Run the step again in {run_id}?",
        means="The step was in flight when its daemon stopped: it may have done part of "
        "its work, or all of it. Retrying runs it again from the start.",
        button="Retry the step",
        act=act,
        back=f"/runs/{quote(run_id, safe='')}",
        done="retried",
        keep=("effect_id",),
    )


@forms.post("/runs/{run_id}/signal")
async def signal(request: Request, run_id: str) -> Response:
    def act(ctx: ApiServices, who: Viewer, fields: dict[str, str]) -> None:
        name = fields.get("name", "").strip()
        if not name:
            raise InputError("say which signal to send (name)")
        actions.signal(
            ctx.runs,
            ctx.audit,
            run_id,
            name,
            _payload(fields.get("payload", "")),
            key=None,
            note=_note(fields),
            actor=_actor(who),
            now=ctx.clock.now(),
        )

    return await _action(
        request,
        title=f"Send the signal to {run_id}?",
        means="The step waiting for it resumes with the payload as its value, and the "
        "run goes on to its next step.",
        button="Send the signal",
        act=act,
        back=f"/runs/{quote(run_id, safe='')}",
        done="signalled",
        keep=("name", "payload"),
    )


def _payload(text: str) -> Any:
    """A signal's payload: JSON, or nothing. Raises InputError for text that is not JSON."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InputError(f"the payload is not JSON: {exc}") from None
