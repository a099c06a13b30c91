"""HTTP routes for cluster administration: VCs and their grants, groups and their members,
per-user quotas, cordons and node labels (admin only; listing VCs excepted)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.admin import (
    CreateVcRequest,
    GrantRequest,
    GroupView,
    MemberRequest,
    NameRequest,
    NodeLabelsRequest,
    QuotaRequest,
    RemovalResult,
    SharingRequest,
    UserQuotaRequest,
    UserQuotaView,
    VcView,
)
from trainyard.schemas.cluster import NodeView
from trainyard.services import admin, removal
from trainyard.services import jobs as job_service
from trainyard.services.views import group_view, node_view, user_quota_view
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["admin"], route_class=BodyRoute)

Admin = Annotated[UserRow, Depends(admin_user)]
User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Force = Annotated[bool, Query(description="Stop the waiting and running jobs this would orphan, instead of refusing")]


def _vc_views(ctx: AppContext) -> list[VcView]:
    with ctx.db.session() as session:
        return admin.describe_vcs(session)


@router.get("/vcs", response_model=list[VcView], responses=errors(401))
def list_vcs(user: User, ctx: Ctx) -> list[VcView]:
    """Virtual clusters with their quota, use and queue; ``default`` holds what no VC guarantees.

    A non-admin sees only the VCs they may use, and no other users' names."""
    with ctx.db.session() as session:
        return admin.describe_vcs(session, user)


@router.post("/vcs", response_model=VcView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_vc(body: CreateVcRequest, _: Admin, ctx: Ctx) -> VcView:
    with ctx.db.session() as session:
        admin.create_vc(session, body.name, gpus=body.gpus, model=body.model,
                        preemption=body.priorityPreemption, clock=ctx.clock, gpu_sharing=body.gpuSharing)
    ctx.wake_controller()
    return next(v for v in _vc_views(ctx) if v.name == body.name)


@router.put("/vcs/{name}/quota", response_model=VcView, responses=errors(401, 403, 404, 413, 422))
def set_vc_quota(name: PathName, body: QuotaRequest, _: Admin, ctx: Ctx) -> VcView:
    with ctx.db.session() as session:
        admin.set_vc_quota(session, name, gpus=body.gpus, model=body.model)
    ctx.wake_controller()
    return next(v for v in _vc_views(ctx) if v.name == name)


@router.put("/vcs/{name}/sharing", response_model=VcView, responses=errors(401, 403, 404, 409, 413, 422))
def set_vc_sharing(name: PathName, body: SharingRequest, _: Admin, ctx: Ctx) -> VcView:
    """Set whose fractional GPU shares the VC's jobs may share a device with (``gpuSharing``)."""
    with ctx.db.session() as session:
        admin.set_vc_sharing(session, name, body.gpuSharing)
    ctx.wake_controller()
    return next(v for v in _vc_views(ctx) if v.name == name)


@router.post("/vcs/{name}/grants", response_model=VcView, responses=errors(401, 403, 404, 413, 422))
def grant_vc(name: PathName, body: GrantRequest, _: Admin, ctx: Ctx) -> VcView:
    with ctx.db.session() as session:
        admin.grant_vc(session, name, body.grantee)
    return next(v for v in _vc_views(ctx) if v.name == name)


@router.delete("/vcs/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_vc(name: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Delete a VC with its quota and grants: refused (409, naming the jobs) while jobs wait or
    run in it, unless ``force``, which stops them."""
    with ctx.db.session() as session:
        result = removal.delete_vc(session, name, force=force, by=by, clock=ctx.clock)
    ctx.wake_controller()
    return result


@router.delete("/vcs/{name}/grants/{grantee}", response_model=RemovalResult,
               responses=errors(401, 403, 404, 409, 422))
def revoke_grant(name: PathName, grantee: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Take back a user's (or ``@group``'s) grant: refused while it is what lets a waiting or
    running job's owner use the VC, unless ``force``, which stops those jobs."""
    with ctx.db.session() as session:
        result = removal.revoke_grant(session, name, grantee, force=force, by=by, clock=ctx.clock)
    ctx.wake_controller()
    return result


@router.get("/groups", response_model=list[GroupView], responses=errors(401, 403))
def list_groups(_: Admin, ctx: Ctx) -> list[GroupView]:
    with ctx.db.session() as session:
        return [group_view(g, m) for g, m in admin.list_groups(session)]


@router.post("/groups", response_model=GroupView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_group(body: NameRequest, _: Admin, ctx: Ctx) -> GroupView:
    with ctx.db.session() as session:
        return group_view(admin.create_group(session, body.name, clock=ctx.clock), [])


@router.post("/groups/{name}/members", response_model=GroupView, responses=errors(401, 403, 404, 413, 422))
def add_member(name: PathName, body: MemberRequest, _: Admin, ctx: Ctx) -> GroupView:
    with ctx.db.session() as session:
        admin.add_member(session, name, body.user)
    with ctx.db.session() as session:
        return next(group_view(g, m) for g, m in admin.list_groups(session) if g.name == name)


@router.delete("/groups/{name}/members/{user}", response_model=RemovalResult,
               responses=errors(401, 403, 404, 409, 422))
def remove_member(name: PathName, user: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Take a user out of a group: refused while the group is what lets one of their waiting
    or running jobs use its VC, unless ``force``, which stops those jobs."""
    with ctx.db.session() as session:
        result = removal.remove_member(session, name, user, force=force, by=by, clock=ctx.clock)
    ctx.wake_controller()
    return result


@router.get("/quotas", response_model=list[UserQuotaView], responses=errors(401, 403))
def list_quotas(_: Admin, ctx: Ctx) -> list[UserQuotaView]:
    with ctx.db.session() as session:
        return [user_quota_view(u, p, m) for u, p, m in admin.list_user_quotas(session)]


@router.put("/quotas/{user}", response_model=list[UserQuotaView], responses=errors(401, 403, 404, 413, 422))
def set_quota(user: PathName, body: UserQuotaRequest, _: Admin, ctx: Ctx) -> list[UserQuotaView]:
    with ctx.db.session() as session:
        admin.set_user_quota(session, user, priority=body.priority, gpus=body.gpus)
    ctx.wake_controller()
    return [q for q in list_quotas(_, ctx) if q.user == user]


@router.post("/nodes/{name}/cordon", response_model=NodeView, responses=errors(401, 403, 404, 422))
def cordon(name: PathName, _: Admin, ctx: Ctx) -> NodeView:
    return _set_cordon(ctx, name, True)


@router.post("/nodes/{name}/uncordon", response_model=NodeView, responses=errors(401, 403, 404, 422))
def uncordon(name: PathName, _: Admin, ctx: Ctx) -> NodeView:
    return _set_cordon(ctx, name, False)


@router.patch("/nodes/{name}/labels", response_model=NodeView, responses=errors(401, 403, 404, 413, 422))
def change_labels(name: PathName, body: NodeLabelsRequest, _: Admin, ctx: Ctx) -> NodeView:
    """Set or remove (null) admins' labels on a node; resource expressions see them
    (``node.labels``) from the next scheduling cycle, without a restart."""
    with ctx.db.session() as session:
        node = admin.change_labels(session, name, body.labels)
        view = node_view(node, job_service.active_tasks(session))
    ctx.wake_controller()
    return view


def _set_cordon(ctx: AppContext, name: str, cordoned: bool) -> NodeView:
    with ctx.db.session() as session:
        node = admin.set_cordon(session, name, cordoned)
        view = node_view(node, job_service.active_tasks(session))
    ctx.wake_controller()
    return view

