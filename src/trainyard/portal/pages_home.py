"""The home page: the cluster at a glance, my jobs and my week's usage; for admins, the
firing alerts and the jobs flagged abnormal, with a Stop button.

The week's usage is accounting over every task the user ran that week (thousands, for a
busy user), so the page asks for it separately (``/home/usage``, loaded by htmx once the
page is shown) rather than making the rest of the page wait for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from trainyard.portal.auth import Page
from trainyard.portal.templating import render
from trainyard.services import cluster_actions, job_actions
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
RECENT_JOBS = 10


@router.get("/")
def home(request: Request, viewer: Page, ctx: Ctx) -> Response:
    user = viewer.user
    now = ctx.clock.now()
    nodes = cluster_actions.nodes(ctx, user, now=now)
    vcs = cluster_actions.vcs(ctx, user)
    counts = job_actions.job_counts(ctx) if user.is_admin else None
    recent = job_actions.job_page(ctx, user, user=user.name, limit=RECENT_JOBS, now=now).items
    alerts = cluster_actions.alerts(ctx, user) if user.is_admin else []
    gpus = [gpu for node in nodes for gpu in node.gpus]
    measured = [gpu.usage.utilPct for gpu in gpus if gpu.usage is not None and gpu.usage.utilPct is not None]
    cluster = {
        "gpus": len(gpus),
        "allocated": sum(gpu.used for gpu in gpus),
        "utilisation": sum(measured) / len(measured) if measured else None,
        "nodes": len(nodes),
        "cordoned": sum(1 for node in nodes if node.cordoned),
    }
    return render(request, "home.html", user=user, web_session=viewer.web_session, cluster=cluster, vcs=vcs,
                  counts=counts, recent=recent, alerts=alerts,
                  abnormal=[a for a in alerts if a.jobId is not None and a.state == "firing"])


@router.get("/home/usage")
def my_week(request: Request, viewer: Page, ctx: Ctx) -> Response:
    """The home page's card of the viewer's usage over the last seven days."""
    user, now = viewer.user, ctx.clock.now()
    week = cluster_actions.usage(ctx, user, by="user", since=now - timedelta(days=7), until=None, now=now,
                                 user=user.name)
    return render(request, "_home_usage.html", user=user, web_session=viewer.web_session, week=week.total)
