"""The virtual clusters page: each VC's quota, use, borrowing and queue (a non-admin sees
only the VCs they may use); admins create VCs, set quotas and GPU sharing rules, grant and
revoke, and delete.

Every change calls the service ``api/routers/admin.py`` calls, so a page can do nothing the
same user's token could not. A refusal (a name taken, a quota over capacity, jobs that a
removal would orphan) shows on the page with its status, the forms still filled in.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from trainyard.core.names import ANY_MODEL, DEFAULT_VC
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GPU_SHARING_NAMES
from trainyard.portal.auth import AdminAction, Page, Viewer
from trainyard.portal.changes import refusal_values, removal_notice
from trainyard.portal.templating import render
from trainyard.services import admin, auth, removal
from trainyard.services.errors import ServiceError
from trainyard.store.queries import nodes as node_queries
from trainyard.web.bodies import PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
Gpus = Annotated[int, Form(ge=0, le=1_000_000)]
Model = Annotated[str, Form(max_length=64)]
Force = Annotated[bool, Form()]
Sharing = Annotated[str, Form(alias="gpuSharing", max_length=32)]  # the API's name, and its errors' path


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, form: dict[str, str] | None = None,
          retry: dict[str, str] | None = None) -> Response:
    """The page; after a refusal, its message, and for one that ``force`` would overcome
    (``retry``: the action and its fields) a button that repeats it, stopping the jobs."""
    with ctx.db.session() as session:
        vcs = admin.describe_vcs(session, viewer.user)
        models = sorted(node_queries.gpus_by_model(session)) if viewer.user.is_admin else []
        people = [u.name for u in auth.list_users(session)] if viewer.user.is_admin else []
        groups = [g.name for g, _ in admin.list_groups(session)] if viewer.user.is_admin else []
    return render(request, "vcs.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, vcs=vcs, models=models, people=people,
                  groups=groups, any_model=ANY_MODEL, default_vc=DEFAULT_VC, notice=notice, form=form or {},
                  sharing_rules=GPU_SHARING_NAMES, default_sharing=DEFAULT_GPU_SHARING.value,
                  **refusal_values(failed, retry))


@router.get("/vcs")
def vcs_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _page(request, viewer, ctx)


@router.post("/vcs")
def create_vc(request: Request, viewer: AdminAction, ctx: Ctx, name: Annotated[str, Form(max_length=64)],
              gpus: Gpus, model: Model = "", preemption: Annotated[bool, Form()] = False,
              sharing: Sharing = DEFAULT_GPU_SHARING.value) -> Response:
    try:
        with ctx.db.session() as session:
            admin.create_vc(session, name, gpus=gpus, model=model or None, preemption=preemption, clock=ctx.clock,
                            gpu_sharing=sharing)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     form={"name": name, "gpus": str(gpus), "model": model, "gpuSharing": sharing})
    ctx.wake_controller()
    return _page(request, viewer, ctx, notice=f"created virtual cluster {name}")


@router.post("/vcs/{name}/quota")
def set_quota(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, gpus: Gpus,
              model: Model = "") -> Response:
    try:
        with ctx.db.session() as session:
            admin.set_vc_quota(session, name, gpus=gpus, model=model or None)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    ctx.wake_controller()
    return _page(request, viewer, ctx, notice=f"{name}: {gpus} {model or 'GPUs of any model'} guaranteed")


@router.post("/vcs/{name}/sharing")
def set_sharing(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, sharing: Sharing) -> Response:
    try:
        with ctx.db.session() as session:
            admin.set_vc_sharing(session, name, sharing)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    ctx.wake_controller()
    return _page(request, viewer, ctx, notice=f"{name}: fractional GPUs shared with {sharing}")


@router.post("/vcs/{name}/grants")
def grant(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
          grantee: Annotated[str, Form(max_length=65)]) -> Response:
    try:
        with ctx.db.session() as session:
            admin.grant_vc(session, name, grantee.strip())
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{grantee.strip()} may use {name}")


@router.post("/vcs/{name}/grants/revoke")
def revoke(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
           grantee: Annotated[str, Form(max_length=65)], force: Force = False) -> Response:
    try:
        with ctx.db.session() as session:
            result = removal.revoke_grant(session, name, grantee, force=force, by=viewer.user, clock=ctx.clock)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     retry={"action": f"/vcs/{quote(name)}/grants/revoke", "grantee": grantee})
    ctx.wake_controller()
    return _page(request, viewer, ctx, notice=removal_notice(result))


@router.post("/vcs/{name}/delete")
def delete(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, force: Force = False) -> Response:
    try:
        with ctx.db.session() as session:
            result = removal.delete_vc(session, name, force=force, by=viewer.user, clock=ctx.clock)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, retry={"action": f"/vcs/{quote(name)}/delete"})
    ctx.wake_controller()
    return _page(request, viewer, ctx, notice=removal_notice(result))
