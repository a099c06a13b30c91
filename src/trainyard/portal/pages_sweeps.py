"""The sweeps pages: ``/sweeps`` (your sweeps; an admin's: everyone's) and ``/sweeps/{id}``
(each job of the sweep: index, parameters, state, why it waits, the sweep's metric), with
Stop for the whole sweep. Through the services the API calls, with the same checks: another
user's sweep is not found."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from trainyard.portal.auth import Action, Page
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.services import sweeps as sweep_service
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
SweepId = Annotated[int, Path(ge=1, le=MAX_ID)]
REFRESH_SECONDS = 3  # how often a live sweep's page reloads its table


@router.get("/sweeps")
def sweeps_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    page = sweep_service.list_sweeps(ctx, viewer.user, limit=sweep_service.MAX_PAGE)
    return render(request, "sweeps.html", user=viewer.user, web_session=viewer.web_session, sweeps=page.items,
                  more=page.next is not None)


@router.get("/sweeps/{sweep_id}")
async def sweep_page(request: Request, sweep_id: SweepId, viewer: Page, ctx: Ctx) -> Response:
    sweep = await run_in_threadpool(sweep_service.show_sweep, ctx, viewer.user, sweep_id)
    return render(request, "sweep.html", user=viewer.user, web_session=viewer.web_session, sweep=sweep,
                  params_text=sweep_service.params_text, refresh_seconds=REFRESH_SECONDS)


@router.post("/sweeps/{sweep_id}/stop")
def stop_sweep(sweep_id: SweepId, viewer: Action, ctx: Ctx) -> Response:
    sweep_service.stop_sweep(ctx, viewer.user, sweep_id)
    return RedirectResponse(f"/sweeps/{sweep_id}", status_code=303, headers=SECURITY_HEADERS)
