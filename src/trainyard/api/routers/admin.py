"""HTTP routes for cluster administration: VCs and their grants, groups and their members,
per-user quotas, cordons and node labels (admin only; listing VCs excepted)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.admin import (
    KEEP,
    BorrowingRequest,
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
from trainyard.services import cluster_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["admin"], route_class=BodyRoute)

Admin = Annotated[UserRow, Depends(admin_user)]
User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Force = Annotated[bool, Query(description="Stop the waiting and running jobs this would orphan, instead of refusing")]


@router.get("/vcs", response_model=list[VcView], responses=errors(401))
def list_vcs(user: User, ctx: Ctx) -> list[VcView]:
    """Virtual clusters with their quota, use and queue; ``default`` holds what no VC guarantees.

    A non-admin sees only the VCs they may use, and no other users' names."""
    return cluster_actions.vcs(ctx, user)


@router.post("/vcs", response_model=VcView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_vc(body: CreateVcRequest, _: Admin, ctx: Ctx) -> VcView:
    cluster_actions.create_vc(ctx, body.name, gpus=body.gpus, model=body.model, preemption=body.priorityPreemption,
                              gpu_sharing=body.gpuSharing,
                              borrow_limit=body.borrowLimit, lend_limit=body.lendLimit, weight=body.weight)
    return cluster_actions.vc(ctx, body.name)


@router.put("/vcs/{name}/quota", response_model=VcView, responses=errors(401, 403, 404, 413, 422))
def set_vc_quota(name: PathName, body: QuotaRequest, _: Admin, ctx: Ctx) -> VcView:
    cluster_actions.set_vc_quota(ctx, name, gpus=body.gpus, model=body.model)
    return cluster_actions.vc(ctx, name)


@router.put("/vcs/{name}/sharing", response_model=VcView, responses=errors(401, 403, 404, 409, 413, 422))
def set_vc_sharing(name: PathName, body: SharingRequest, _: Admin, ctx: Ctx) -> VcView:
    """Set whose fractional GPU shares the VC's jobs may share a device with (``gpuSharing``)."""
    cluster_actions.set_vc_sharing(ctx, name, body.gpuSharing)
    return cluster_actions.vc(ctx, name)


@router.put("/vcs/{name}/borrowing", response_model=VcView, responses=errors(401, 403, 404, 413, 422))
def set_vc_borrowing(name: PathName, body: BorrowingRequest, _: Admin, ctx: Ctx) -> VcView:
    """Set how many GPUs the VC (``default`` too) may borrow beyond its quota and lend of its
    unused quota (whole GPUs of each model; null: no limit), and its weight among borrowers.
    A field left out stays as it is. The controller's next cycle uses them."""
    given = body.model_fields_set
    cluster_actions.set_vc_borrowing(
        ctx, name,
        borrow_limit=body.borrowLimit if "borrowLimit" in given else KEEP,
        lend_limit=body.lendLimit if "lendLimit" in given else KEEP,
        weight=KEEP if body.weight is None else body.weight,  # given, it is a number (the body's check)
    )
    return cluster_actions.vc(ctx, name)


@router.post("/vcs/{name}/grants", response_model=VcView, responses=errors(401, 403, 404, 413, 422))
def grant_vc(name: PathName, body: GrantRequest, _: Admin, ctx: Ctx) -> VcView:
    cluster_actions.grant_vc(ctx, name, body.grantee)
    return cluster_actions.vc(ctx, name)


@router.delete("/vcs/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_vc(name: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Delete a VC with its quota and grants: refused (409, naming the jobs) while jobs wait or
    run in it, unless ``force``, which stops them."""
    return cluster_actions.delete_vc(ctx, by, name, force=force)


@router.delete("/vcs/{name}/grants/{grantee}", response_model=RemovalResult,
               responses=errors(401, 403, 404, 409, 422))
def revoke_grant(name: PathName, grantee: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Take back a user's (or ``@group``'s) grant: refused while it is what lets a waiting or
    running job's owner use the VC, unless ``force``, which stops those jobs."""
    return cluster_actions.revoke_grant(ctx, by, name, grantee, force=force)


@router.get("/groups", response_model=list[GroupView], responses=errors(401, 403))
def list_groups(_: Admin, ctx: Ctx) -> list[GroupView]:
    return cluster_actions.groups(ctx)


@router.post("/groups", response_model=GroupView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_group(body: NameRequest, _: Admin, ctx: Ctx) -> GroupView:
    return cluster_actions.create_group(ctx, body.name)


@router.post("/groups/{name}/members", response_model=GroupView, responses=errors(401, 403, 404, 413, 422))
def add_member(name: PathName, body: MemberRequest, _: Admin, ctx: Ctx) -> GroupView:
    cluster_actions.add_member(ctx, name, body.user)
    return next(g for g in cluster_actions.groups(ctx) if g.name == name)


@router.delete("/groups/{name}/members/{user}", response_model=RemovalResult,
               responses=errors(401, 403, 404, 409, 422))
def remove_member(name: PathName, user: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Take a user out of a group: refused while the group is what lets one of their waiting
    or running jobs use its VC, unless ``force``, which stops those jobs."""
    return cluster_actions.remove_member(ctx, by, name, user, force=force)


@router.get("/quotas", response_model=list[UserQuotaView], responses=errors(401, 403))
def list_quotas(_: Admin, ctx: Ctx) -> list[UserQuotaView]:
    return cluster_actions.user_quotas(ctx)


@router.put("/quotas/{user}", response_model=list[UserQuotaView], responses=errors(401, 403, 404, 413, 422))
def set_quota(user: PathName, body: UserQuotaRequest, _: Admin, ctx: Ctx) -> list[UserQuotaView]:
    cluster_actions.set_user_quota(ctx, user, priority=body.priority, gpus=body.gpus)
    return [q for q in cluster_actions.user_quotas(ctx) if q.user == user]


@router.post("/nodes/{name}/cordon", response_model=NodeView, responses=errors(401, 403, 404, 422))
def cordon(name: PathName, _: Admin, ctx: Ctx) -> NodeView:
    return cluster_actions.set_cordon(ctx, name, True)


@router.post("/nodes/{name}/uncordon", response_model=NodeView, responses=errors(401, 403, 404, 422))
def uncordon(name: PathName, _: Admin, ctx: Ctx) -> NodeView:
    return cluster_actions.set_cordon(ctx, name, False)


@router.patch("/nodes/{name}/labels", response_model=NodeView, responses=errors(401, 403, 404, 413, 422))
def change_labels(name: PathName, body: NodeLabelsRequest, _: Admin, ctx: Ctx) -> NodeView:
    """Set or remove (null) admins' labels on a node; resource expressions see them
    (``node.labels``) from the next scheduling cycle, without a restart."""
    return cluster_actions.change_labels(ctx, name, body.labels)
