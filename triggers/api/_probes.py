"""`/healthz` and `/readyz` on the API's listener, for load balancers and Kubernetes.

Outside `/api/v1/` and without a token: a probe carries none. They answer what the
metrics listener's do (`triggers.probes`), and nothing secret.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from triggers.api._context import Services
from triggers.api._routing import ERRORS, ApiRoute, Json
from triggers.api._schemas import HealthDocument, ReadinessDocument
from triggers.probes import ProbeAnswer

probes = APIRouter(route_class=ApiRoute, tags=["probes"])


def _failing(what: str) -> ProbeAnswer:
    return ProbeAnswer(
        False, {"status": "failing", "failing": [what], "reason": "no scheduler in this process"}
    )


def _json(found: ProbeAnswer) -> Json:
    return Json(found.document, status_code=found.status, headers={"Cache-Control": "no-store"})


def _responses(model: type[Any], ok: str, failing: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {"model": model, "description": ok},
        400: ERRORS[400],
        503: {"model": model, "description": failing},
    }


@probes.get(
    "/healthz",
    response_model=HealthDocument,
    responses=_responses(HealthDocument, "Alive: the scheduler ticks.", "The ticks stalled."),
)
def healthz(ctx: Services) -> Json:
    """Alive: the scheduler's last tick is recent (within three poll intervals, at
    least 30 s). No token needed."""
    return _json(ctx.probes.health() if ctx.probes else _failing("ticks"))


@probes.get(
    "/readyz",
    response_model=ReadinessDocument,
    responses=_responses(
        ReadinessDocument,
        "Ready: the store answers and the declarations are applied.",
        "A check fails; `failing` names it.",
    ),
)
def readyz(ctx: Services) -> Json:
    """Ready: the store answers a query within 2 s and the last apply of the
    declarations file succeeded. No token needed."""
    return _json(ctx.probes.readiness() if ctx.probes else _failing("store"))


# Health checkers that send HEAD get the same status (uvicorn sends no body); not in
# the document, which describes the GETs.
for _path, _probe in (("/healthz", healthz), ("/readyz", readyz)):
    probes.add_api_route(_path, _probe, methods=["HEAD"], include_in_schema=False)
