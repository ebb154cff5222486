"""Pages rendered from templates (Jinja2), with the headers every page carries.

Every page is a whole HTML document that reads well without JavaScript; the one
script (`assets/dashboard.js`) only shows times in the viewer's zone and refreshes
the parts of a page marked `data-live`. Nothing is fetched from elsewhere: the
Content-Security-Policy allows this daemon's own script and styles only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from triggers import __version__
from triggers.api._access import ApiConfig, Caller
from triggers.api.dashboard import _words
from triggers.api.dashboard._sessions import COOKIE, Session, Sessions, session_caller

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
"""Headers of every page: nothing from elsewhere, no framing, nothing kept by caches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Viewer:
    """Who is looking: their session, and as whom they act (None: they must sign in)."""

    session: Session
    caller: Caller | None
    new: bool
    """The session was started by this request: its cookie is set on the answer."""
    tokens: bool
    """Whether tokens are configured (else every local caller may act, unsigned)."""

    @property
    def may_write(self) -> bool:
        return self.caller is not None and self.caller.may_write

    @property
    def who(self) -> str:
        if self.caller is None:
            return "not signed in"
        if not self.tokens:
            return "local (no tokens configured)"
        access = "may act" if self.caller.may_write else "read only"
        return f"{self.caller.name or 'unnamed token'} ({access})"


def viewer(request: Request) -> Viewer:
    """The request's viewer; a browser without a live session gets a new one."""
    sessions: Sessions = request.app.state.sessions
    config: ApiConfig = request.app.state.config
    now = request.app.state.services.clock.now()
    found = sessions.find(request.cookies.get(COOKIE), now=now)
    session = found or sessions.start(now=now)
    address = request.client.host if request.client else "unknown"
    caller = session_caller(session, config.tokens, address=address)
    return Viewer(
        session=session, caller=caller, new=found is None, tokens=config.tokens is not None
    )


def set_cookie(request: Request, response: Response, session: Session) -> None:
    """The session's cookie: HttpOnly, SameSite=Strict, Secure over TLS, for every path."""
    response.set_cookie(
        COOKIE,
        session.id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def page(
    request: Request,
    template: str,
    who: Viewer,
    *,
    status: int = 200,
    **context: Any,
) -> Response:
    """A rendered page, with the session's cookie when it is new.

    Its ETag is a digest of what it is drawn from (the documents, the viewer, the query),
    not of its text: a live refresh (`If-None-Match`) of a page whose documents have not
    changed is answered 304 before any drawing. Only the relative times in it would
    differ ("3 min ago"), and the script keeps those current itself."""
    tag = _etag(request, template, who, context)
    unchanged = tag in request.headers.get("if-none-match", "")
    if unchanged and status == HTTPStatus.OK and not who.new:
        return Response(status_code=304, headers=HEADERS | {"ETag": tag})
    now = request.app.state.services.clock.now()
    body = (
        environment()
        .get_template(template)
        .render(
            viewer=who,
            csrf=who.session.csrf,
            now=now,
            path=request.url.path,
            version=__version__,
            done=request.query_params.get("done"),
            **context,
        )
    )
    response = HTMLResponse(body, status_code=status, headers=HEADERS | {"ETag": tag})
    if who.new:
        set_cookie(request, response, who.session)
    return response


def _etag(request: Request, template: str, who: Viewer, context: dict[str, Any]) -> str:
    """A digest of everything a page is drawn from but the clock: a document's `now`,
    and a live daemon's heartbeat but for its minute (it ticks every few seconds)."""
    parts = dict(context)
    doc = parts.get("doc")
    if isinstance(doc, dict) and ("now" in doc or "daemons" in doc):
        parts["doc"] = {key: value for key, value in doc.items() if key != "now"}
        parts["doc"]["daemons"] = [
            daemon | {"last_tick_at": str(daemon.get("last_tick_at"))[:16], "last_tick_age_s": 0}
            for daemon in doc.get("daemons") or []
            if isinstance(daemon, dict)
        ]
    text = json.dumps(
        [template, __version__, who.who, who.session.csrf, str(request.url), parts],
        sort_keys=True,
        default=repr,
    )
    return f'"{hashlib.blake2b(text.encode(), digest_size=12).hexdigest()}"'


def to_login(request: Request, who: Viewer) -> Response:
    """Off to the sign-in form, coming back here after it (the path only: no query)."""
    response = RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    response.headers.update(HEADERS)
    if who.new:
        set_cookie(request, response, who.session)
    return response


def local_path(text: str | None) -> str:
    """A path of this dashboard to go to after sign-in; anything else is the overview."""
    if not text or not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text


def _when(value: str | datetime | None) -> Markup:
    """An instant as `<time>`: UTC in the page, the viewer's zone once the script runs,
    UTC always on hover."""
    instant = _words.parse(value)
    if instant is None:
        return Markup("-")
    utc = _words.utc_words(instant)
    stamp = instant.isoformat().replace("+00:00", "Z")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(stamp, utc, utc)


def _ago(value: str | datetime | None, now: datetime) -> Markup:
    """An instant relative to now (`3 min ago`), its time in UTC on hover."""
    instant = _words.parse(value)
    if instant is None:
        return Markup("-")
    stamp = instant.isoformat().replace("+00:00", "Z")
    return Markup('<time datetime="{}" title="{}" data-relative>{}</time>').format(
        stamp, _words.utc_words(instant), _words.relative(instant, now=now)
    )


def _badge(name: str | None) -> Markup:
    """An outcome or state: an icon and a word, coloured by its tone (never colour alone)."""
    found = _words.look(name)
    return Markup('<span class="badge {}"><span aria-hidden="true">{}</span> {}</span>').format(
        found.tone, found.icon, found.word
    )


def _sparkline(rows: list[dict[str, Any]]) -> Markup:
    """A trigger's recent outcomes, oldest first: a small bar each (a failure taller,
    with its time on hover), with the counts in words for screen readers and on hover.

    The bars of each tone but a failure's are one path: a page of fifty triggers
    draws a thousand bars, and a shape with a tooltip each was most of its bytes."""
    if not rows:
        return Markup('<span class="quiet">no fires yet</span>')
    counts: dict[str, int] = {}
    paths: dict[str, list[str]] = {}
    failures = []
    for number, row in enumerate(rows):
        outcome = str(row["outcome"])
        counts[outcome] = counts.get(outcome, 0) + 1
        tone = _tone(outcome)
        if tone == "bad":
            failures.append(
                f'<rect class="bad" x="{number * 6}" y="0" width="4" height="16"><title>'
                f"{escape(outcome)} · {escape(_words.utc_words(row['occurrence']))}</title></rect>"
            )
        else:
            paths.setdefault(tone, []).append(f"M{number * 6} 6h4v10h-4z")
    said = escape(", ".join(f"{n} {outcome}" for outcome, n in counts.items()))
    shapes = "".join(f'<path class="{tone}" d="{"".join(d)}"/>' for tone, d in paths.items())
    return Markup(  # noqa: S704 (every value in it is a number, a tone or escaped above)
        f'<svg class="spark" width="{len(rows) * 6}" height="16" role="img" '
        f'aria-label="last {len(rows)}: {said}"><title>last {len(rows)}: '
        f"{said}</title>{shapes}{''.join(failures)}</svg>"
    )


@lru_cache(maxsize=64)
def _tone(outcome: str) -> str:
    """A sparkline bar's tone (its class)."""
    return _words.look(outcome).tone


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("triggers.api.dashboard", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        when=_when,
        ago=_ago,
        badge=_badge,
        sparkline=_sparkline,
        schedule_words=_words.schedule_words,
        span_words=_words.span_words,
        utc_words=_words.utc_words,
    )
    env.filters["quote"] = lambda text: quote(str(text), safe="")
    return env
