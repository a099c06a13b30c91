"""The datasets page (issue 35): the datasets the signed-in user may read (an admin: all),
and what each node's cache holds of them, with its hits, misses, bytes fetched and
evictions. It reads the same use cases as ``api/routers/datasets.py``
(``services/dataset_actions.py``), so it shows nothing that user's token could not;
datasets are registered and granted with ``yard dataset`` or the SDK."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from trainyard.portal.auth import Page
from trainyard.portal.templating import render
from trainyard.services import dataset_actions
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]


@router.get("/datasets")
def datasets_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return render(request, "datasets.html", user=viewer.user, web_session=viewer.web_session,
                  datasets=dataset_actions.dataset_views(ctx, viewer.user),
                  caches=dataset_actions.cache_views(ctx, viewer.user))
