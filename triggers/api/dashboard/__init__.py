"""The web dashboard served at `/` beside the API (docs/dashboard.md).

Pages rendered on the server from the documents the CLI and the API print: the
overview, the trigger list, a trigger, a run, the audit log and status; sign-in
with an API token at `/login`; the operators' actions as confirmed forms. Its
script and styles are files of this package (`assets/`), served at `/assets/`.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from triggers.api.dashboard._forms import forms
from triggers.api.dashboard._pages import not_found_page, pages
from triggers.api.dashboard._sessions import Sessions

__all__ = ["mount", "not_found_page"]


def mount(app: FastAPI) -> None:
    """Serve the dashboard's pages, forms and assets on `app` (its state holds the
    services and the API's configuration)."""
    app.state.sessions = Sessions()
    app.include_router(pages)
    app.include_router(forms)
    app.mount(
        "/assets", StaticFiles(packages=[("triggers.api.dashboard", "assets")]), name="assets"
    )
