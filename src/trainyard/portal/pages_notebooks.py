"""The notebooks page: the signed-in user's JupyterLab sessions (``yard dev``), each with its
state, the time it has left, how long it has been idle and, once it runs, the link that
opens it (``/sessions/<id>/``, through the server); Renew and Stop; and the "New JupyterLab"
form (GPUs, environment or image, storages, lifetime, opportunistic).

Every change calls the service ``api/routers/sessions.py`` calls, with the same rules.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from trainyard.core.priorities import Priority
from trainyard.core.states import EnvironmentState, JobState
from trainyard.portal.auth import Action, Page, Viewer
from trainyard.portal.changes import refusal_values
from trainyard.portal.templating import render
from trainyard.schemas.sessions import SessionRequest
from trainyard.services import cluster_actions, job_actions
from trainyard.services.errors import Invalid, ServiceError
from trainyard.services.storages import Access
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
REFRESH_SECONDS = 3


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, form: dict[str, str] | None = None, table_only: bool = False) -> Response:
    now = ctx.clock.now()
    sessions = job_actions.sessions(ctx, viewer.user, now=now)
    envs = [e.name for e in cluster_actions.environment_views(ctx, viewer.user) if e.state == EnvironmentState.READY]
    mounts = [s.name for s in cluster_actions.storage_views(ctx, viewer.user) if s.access != Access.NONE.label]
    vcs = [vc.name for vc in cluster_actions.vcs(ctx, viewer.user)]
    live = any(s.state not in (JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED) for s in sessions)
    return render(request, "notebooks_table.html" if table_only else "notebooks.html", user=viewer.user,
                  web_session=viewer.web_session, status_code=failed.status if failed else 200, sessions=sessions,
                  environments=envs, storages=mounts, vcs=vcs, now=now, live=live, refresh_seconds=REFRESH_SECONDS,
                  default_hours=ctx.sessions.hours, max_hours=ctx.sessions.max_hours,
                  has_default_python=ctx.sessions.python is not None, notice=notice, form=form or {},
                  **refusal_values(failed, None))


@router.get("/notebooks")
def notebooks_page(request: Request, viewer: Page, ctx: Ctx, started: int | None = None) -> Response:
    notice = f"session {started} is starting: it opens here once it runs" if started else None
    return _page(request, viewer, ctx, notice=notice)


@router.get("/notebooks/table")
def notebooks_table(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _page(request, viewer, ctx, table_only=True)


@router.post("/notebooks")
def start(request: Request, viewer: Action, ctx: Ctx,
          gpu: Annotated[str, Form(max_length=16)] = "0", environment: Annotated[str, Form(max_length=64)] = "",
          image: Annotated[str, Form(max_length=512)] = "", hours: Annotated[str, Form(max_length=16)] = "",
          vc: Annotated[str, Form(max_length=64)] = "", oppo: Annotated[bool, Form()] = False,
          storage: Annotated[list[str] | None, Form()] = None) -> Response:
    """A new session (``POST /api/v1/sessions``); then back to this page (a reload asks nothing again)."""
    form = {"gpu": gpu, "environment": environment, "image": image, "hours": hours, "vc": vc,
            "opportunistic": "on" if oppo else ""}
    try:
        wanted = _request(gpu, environment, image, hours, vc, oppo, storage or [])
        started = job_actions.start_session(ctx, viewer.user, wanted).id
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form=form)
    return RedirectResponse(f"/notebooks?started={started}", status_code=303)


def _number(field: str, text: str) -> float | None:
    try:
        return float(text) if text.strip() else None
    except ValueError:
        raise Invalid(f"{field}: must be a number (got {text!r})",
                      details=[{"path": field, "message": "must be a number"}]) from None


def _request(gpu: str, environment: str, image: str, hours: str, vc: str, oppo: bool,
             storage: list[str]) -> SessionRequest:
    """The form as the API's request; what it refuses, at the form's own fields."""
    try:
        return SessionRequest(
            gpu=_number("gpu", gpu) or 0, environment=environment or None, image=image.strip() or None,
            hours=_number("hours", hours), virtualCluster=vc or None,
            priority=str(Priority.OPPO) if oppo else None, storages=storage)
    except ValidationError as exc:
        details = [{"path": ".".join(map(str, e["loc"])), "message": str(e["msg"])} for e in exc.errors()]
        raise Invalid("; ".join(f"{d['path']}: {d['message']}" for d in details), details=details) from None


def _session_id(job_id: int) -> int:
    if not 1 <= job_id <= MAX_ID:
        raise Invalid(f"no session {job_id}")
    return job_id


@router.post("/notebooks/{job_id}/renew")
def renew(request: Request, job_id: int, viewer: Action, ctx: Ctx) -> Response:
    try:
        hours = job_actions.renew_session(ctx, viewer.user, _session_id(job_id), None).hours
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"session {job_id} renewed: it lives {hours:g} h from now")


@router.post("/notebooks/{job_id}/stop")
def stop(request: Request, job_id: int, viewer: Action, ctx: Ctx) -> Response:
    try:
        job_actions.stop_session(ctx, viewer.user, _session_id(job_id))
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"session {job_id} is stopping")
