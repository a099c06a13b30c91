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
from trainyard.services import admin, live
from trainyard.services import alerts as alert_service
from trainyard.services import jobs as job_service
from trainyard.services.usage import period_of, usage_report
from trainyard.services.views import job_summary
from trainyard.store.queries import jobs as job_queries
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
RECENT_JOBS = 10


@router.get("/")
def home(request: Request, viewer: Page, ctx: Ctx) -> Response:
    user = viewer.user
    now = ctx.clock.now()
    with ctx.db.session() as session:
        nodes = live.live_nodes(session, user, now, ctx.monitor_interval_seconds)
        vcs = admin.describe_vcs(session, user)
        counts = job_queries.job_counts_by_state(session) if user.is_admin else None
        mine, _ = job_service.list_jobs(session, user, user=user.name, limit=RECENT_JOBS)
        recent = [job_summary(row, now) for row in mine]
        alerts = alert_service.list_alerts(session, user) if user.is_admin else []
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
    with ctx.db.session() as session:
        week = usage_report(session, user, by="user", period=period_of(now - timedelta(days=7), None, now),
                            monitor_interval_seconds=ctx.monitor_interval_seconds, user=user.name)
    return render(request, "_home_usage.html", user=user, web_session=viewer.web_session, week=week.total)
