"""HTTP routes for storages: admins create, grant and delete them; every user lists and
shows those they may mount (``services.storages``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.storages import CreateStorageRequest, StorageGrantRequest, StorageView
from trainyard.services import cluster_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["storages"], route_class=BodyRoute)

Admin = Annotated[UserRow, Depends(admin_user)]
User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Force = Annotated[bool, Query(description="Stop the waiting and running jobs that mount it, instead of refusing")]


def _view(ctx: AppContext, viewer: UserRow, name: str) -> StorageView:
    return cluster_actions.storage_views(ctx, viewer, name)[0]


@router.get("/storages", response_model=list[StorageView], responses=errors(401))
def list_storages(user: User, ctx: Ctx) -> list[StorageView]:
    """Storages: an admin sees every one with its grants; a user those they may mount, with
    their access (``home`` and their groups' ``@group`` storages too, where enabled)."""
    return cluster_actions.storage_views(ctx, user)


@router.get("/storages/{name}", response_model=StorageView, responses=errors(401, 404, 422))
def show_storage(name: PathName, user: User, ctx: Ctx) -> StorageView:
    return _view(ctx, user, name)


@router.post("/storages", response_model=StorageView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_storage(body: CreateStorageRequest, by: Admin, ctx: Ctx) -> StorageView:
    cluster_actions.create_storage(ctx, body.name, body.path, read_only=body.readOnly, kind=body.kind,
                                   description=body.description)
    return _view(ctx, by, body.name)


@router.post("/storages/{name}/grants", response_model=StorageView, responses=errors(401, 403, 404, 413, 422))
def grant_storage(name: PathName, body: StorageGrantRequest, by: Admin, ctx: Ctx) -> StorageView:
    """Let a user, or every member of ``@group``, mount the storage (``readOnly``: read-only);
    granting again changes the grant."""
    cluster_actions.grant_storage(ctx, name, body.grantee, read_only=body.readOnly)
    return _view(ctx, by, name)


@router.delete("/storages/{name}/grants/{grantee}", response_model=RemovalResult,
               responses=errors(401, 403, 404, 409, 422))
def revoke_storage_grant(name: PathName, grantee: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Take back a grant: refused (409, naming the jobs) while it is what lets a waiting or
    running job mount the storage, unless ``force``, which stops those jobs."""
    return cluster_actions.revoke_storage_grant(ctx, by, name, grantee, force=force)


@router.delete("/storages/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_storage(name: PathName, by: Admin, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Delete a storage and its grants (never its files): refused (409) while a waiting or
    running job mounts it, unless ``force``, which stops those jobs."""
    return cluster_actions.delete_storage(ctx, by, name, force=force)
