"""The dashboard's sessions: who a browser is signed in as, and its CSRF token.

A browser signs in by posting an API token to `/login`; the daemon answers with a
session cookie (`triggers_session`: random, HttpOnly, SameSite=Strict, Secure when
the request came over TLS) that names a session held in memory. The session keeps
the token's name, whether it may write, and a SHA-256 digest of the token (never the
token), so a token removed from its file (SIGHUP) signs its sessions out at their
next request. Every session, signed in or not, carries a CSRF token that each form
posts back. A daemon's restart signs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from triggers.api._access import Caller, Tokens

COOKIE = "triggers_session"
IDLE = timedelta(hours=12)
"""A session unused this long is signed out."""
LIFETIME = timedelta(days=7)
"""A session is signed out this long after sign-in, used or not."""
MAX_SESSIONS = 10_000
"""Sessions kept at most; past it the least recently used one is dropped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One browser's session."""

    id: str
    csrf: str
    started_at: datetime
    seen_at: datetime
    name: str | None = None
    """The token's name (`ci` of `ci 3f9a...`), None for an unnamed token."""
    digest: str | None = None
    """SHA-256 of the token signed in with; None: not signed in."""

    @property
    def signed_in(self) -> bool:
        return self.digest is not None

    def csrf_matches(self, presented: str | None) -> bool:
        """Whether a form's CSRF field is this session's (compared in constant time)."""
        return presented is not None and hmac.compare_digest(presented, self.csrf)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Sessions:
    """The sessions in force, in memory, least recently used first."""

    def __init__(self, *, limit: int = MAX_SESSIONS) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def start(self, *, now: datetime) -> Session:
        """A new session, not signed in (it carries a CSRF token for the sign-in form)."""
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            started_at=now,
            seen_at=now,
        )
        self._keep(session)
        return session

    def find(self, session_id: str | None, *, now: datetime) -> Session | None:
        """The live session of a cookie's value, marked seen; None when it is unknown or
        has expired (then it is forgotten)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.seen_at > IDLE or now - session.started_at > LIFETIME:
                del self._sessions[session_id]
                return None
            session = replace(session, seen_at=now)
            self._sessions[session_id] = session
            self._sessions.move_to_end(session_id)
            return session

    def sign_in(
        self, old: Session | None, *, token: str, name: str | None, now: datetime
    ) -> Session:
        """A new session (new id and CSRF token: a session id known before sign-in is
        worth nothing after it) signed in with `token`; `old` is forgotten."""
        if old is not None:
            self.end(old.id)
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            started_at=now,
            seen_at=now,
            name=name,
            digest=token_digest(token),
        )
        self._keep(session)
        return session

    def end(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _keep(self, session: Session) -> None:
        with self._lock:
            self._sessions[session.id] = session
            while len(self._sessions) > self._limit:
                self._sessions.popitem(last=False)


def session_caller(session: Session, tokens: Tokens | None, *, address: str) -> Caller | None:
    """Who a session acts as: with no token file, every local caller (who may write);
    else the signed-in token, as long as it is still in force (None: sign in)."""
    if tokens is None:
        return Caller(name=None, may_write=True, address=address)
    if session.digest is None:
        return None
    token = tokens.by_digest(session.digest)
    if token is None:
        return None
    return Caller(name=token.name, may_write=token.may_write, address=address)
