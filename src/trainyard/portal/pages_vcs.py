"""The virtual clusters page: each VC's quota, use, borrowing and queue (a non-admin sees
only the VCs they may use); admins create VCs, set quotas, GPU sharing rules and borrowing
(limits and weight, ``default``'s too), grant and revoke, and delete.

Every change calls the use case ``api/routers/admin.py`` calls (``services/cluster_actions.py``),
so a page can do nothing the same user's token could not. A refusal (a name taken, a quota over capacity, jobs that a
removal would orphan) shows on the page with its status, the forms still filled in.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from trainyard.core.names import ANY_MODEL, DEFAULT_VC
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GPU_SHARING_NAMES
from trainyard.portal.auth import AdminAction, Page, Viewer
from trainyard.portal.changes import refusal_values, removal_notice
from trainyard.portal.templating import render
from trainyard.schemas.admin import KEEP, Keep
from trainyard.services import account_actions, cluster_actions
from trainyard.services.errors import Invalid, ServiceError
from trainyard.web.bodies import PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
Gpus = Annotated[int, Form(ge=0, le=1_000_000)]
Model = Annotated[str, Form(max_length=64)]
Force = Annotated[bool, Form()]
Sharing = Annotated[str, Form(alias="gpuSharing", max_length=32)]  # the API's name, and its errors' path
Limit = Annotated[str, Form(alias="borrowLimit", max_length=16)]


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, form: dict[str, str] | None = None,
          retry: dict[str, str] | None = None) -> Response:
    """The page; after a refusal, its message, and for one that ``force`` would overcome
    (``retry``: the action and its fields) a button that repeats it, stopping the jobs."""
    vcs = cluster_actions.vcs(ctx, viewer.user)
    models = cluster_actions.gpu_models(ctx) if viewer.user.is_admin else []
    people = [u.name for u in account_actions.users(ctx)] if viewer.user.is_admin else []
    groups = [g.name for g in cluster_actions.groups(ctx)] if viewer.user.is_admin else []
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
        cluster_actions.create_vc(ctx, name, gpus=gpus, model=model or None, preemption=preemption,
                                  gpu_sharing=sharing)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     form={"name": name, "gpus": str(gpus), "model": model, "gpuSharing": sharing})
    return _page(request, viewer, ctx, notice=f"created virtual cluster {name}")


@router.post("/vcs/{name}/quota")
def set_quota(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, gpus: Gpus,
              model: Model = "") -> Response:
    try:
        cluster_actions.set_vc_quota(ctx, name, gpus=gpus, model=model or None)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{name}: {gpus} {model or 'GPUs of any model'} guaranteed")


@router.post("/vcs/{name}/sharing")
def set_sharing(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, sharing: Sharing) -> Response:
    try:
        cluster_actions.set_vc_sharing(ctx, name, sharing)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{name}: fractional GPUs shared with {sharing}")


def _form_limit(path: str, text: str) -> int | None:
    """A limit typed in the form: a whole number of GPUs; blank (or ``none``): no limit."""
    text = text.strip()
    if not text or text.lower() == "none":
        return None
    if re.fullmatch(r"-?[0-9]+", text):  # int() alone would take "1_0" and other digits than 0-9
        return int(text)  # below 0: the service refuses it, with the same path
    raise Invalid(f"{path} must be a whole number of GPUs ≥ 0, or blank for no limit; got {text!r}",
                  details=[{"path": path, "message": "a whole number of GPUs ≥ 0, or blank"}])


_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def _form_weight(text: str) -> float | Keep:
    """The weight typed in the form; blank: left as it is."""
    text = text.strip()
    if not text:
        return KEEP
    if not _DECIMAL.fullmatch(text):  # float() would take "1_0", "inf" and other digits than 0-9
        raise Invalid(f"weight must be a number such as 2 or 0.5; got {text!r}",
                      details=[{"path": "weight", "message": "a number such as 2 or 0.5"}])
    return float(text)  # out of range: the service refuses it


@router.post("/vcs/{name}/borrowing")
def set_borrowing(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, borrow_limit: Limit = "",
                  lend_limit: Annotated[str, Form(alias="lendLimit", max_length=16)] = "",
                  weight: Annotated[str, Form(max_length=32)] = "") -> Response:
    """Set both limits (blank: no limit) and the weight (blank: as it is)."""
    try:
        cluster_actions.set_vc_borrowing(ctx, name, borrow_limit=_form_limit("borrowLimit", borrow_limit),
                                         lend_limit=_form_limit("lendLimit", lend_limit), weight=_form_weight(weight))
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{name}: borrowing limits and weight set")


@router.post("/vcs/{name}/grants")
def grant(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
          grantee: Annotated[str, Form(max_length=65)]) -> Response:
    try:
        cluster_actions.grant_vc(ctx, name, grantee.strip())
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{grantee.strip()} may use {name}")


@router.post("/vcs/{name}/grants/revoke")
def revoke(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
           grantee: Annotated[str, Form(max_length=65)], force: Force = False) -> Response:
    try:
        result = cluster_actions.revoke_grant(ctx, viewer.user, name, grantee, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     retry={"action": f"/vcs/{quote(name)}/grants/revoke", "grantee": grantee})
    return _page(request, viewer, ctx, notice=removal_notice(result))


@router.post("/vcs/{name}/delete")
def delete(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, force: Force = False) -> Response:
    try:
        result = cluster_actions.delete_vc(ctx, viewer.user, name, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, retry={"action": f"/vcs/{quote(name)}/delete"})
    return _page(request, viewer, ctx, notice=removal_notice(result))
