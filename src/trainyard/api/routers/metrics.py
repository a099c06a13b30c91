"""``GET /metrics``: the Prometheus exposition (at the usual path, not under ``/api/v1``).

Scraping needs an admin's bearer token: the page names every user's jobs and figures. A
Prometheus server sends it with ``authorization: {credentials: <token>}`` in its scrape
config (docs/admin/monitoring.md, "Prometheus").
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from trainyard.api.deps import admin_user
from trainyard.api.openapi import errors
from trainyard.monitor.exposition import CONTENT_TYPE, render
from trainyard.services.cluster_metrics import figures_now
from trainyard.store.rows import UserRow
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["monitoring"])


def _page(ctx: AppContext) -> str:
    figures = figures_now(ctx)
    timings = ctx.controller.timings if ctx.controller is not None else None
    return render(figures, timings)


@router.get(
    "/metrics",
    response_class=Response,  # errors stay JSON in the document; the page itself is declared below
    responses={**errors(401, 403), 200: {"description": "Prometheus' text format 0.0.4",
                                         "content": {CONTENT_TYPE: {"schema": {"type": "string"}}}}},
)
async def metrics(
    _: Annotated[UserRow, Depends(admin_user)], ctx: Annotated[AppContext, Depends(context)]
) -> Response:
    """The cluster in Prometheus' text format (admins only): GPUs, nodes, VCs, queues, jobs, tasks."""
    page = await run_in_threadpool(_page, ctx)
    return Response(page, media_type=CONTENT_TYPE)
