"""HTTP routes for datasets (``services.datasets``): any user registers one and grants it;
everyone lists and shows those they may read; each node's cache is shown to all (an admin
sees every entry, a user those of datasets they may read)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.api.routers.admin import Force
from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.datasets import DatasetGrantRequest, DatasetView, NodeCacheView, RegisterDatasetRequest
from trainyard.services import dataset_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["datasets"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]


@router.get("/datasets", response_model=list[DatasetView], responses=errors(401))
def list_datasets(user: User, ctx: Ctx) -> list[DatasetView]:
    """The datasets the caller may read (an admin: all)."""
    return dataset_actions.dataset_views(ctx, user)


@router.get("/datasets/cache", response_model=list[NodeCacheView], responses=errors(401))
def dataset_cache(user: User, ctx: Ctx) -> list[NodeCacheView]:
    """Each node's dataset cache: capacity, use, hits, misses, bytes fetched, evictions, entries."""
    return dataset_actions.cache_views(ctx, user)


@router.get("/datasets/{name}", response_model=DatasetView, responses=errors(401, 404, 422))
def show_dataset(name: PathName, user: User, ctx: Ctx) -> DatasetView:
    return dataset_actions.dataset_views(ctx, user, name)[0]


@router.put("/datasets/{name}", response_model=DatasetView, responses=errors(401, 403, 404, 409, 413, 422))
def register_dataset(name: PathName, body: RegisterDatasetRequest, user: User, ctx: Ctx) -> DatasetView:
    """Register a dataset, or change its source or version (its owner or an admin): the next
    task that reads it fetches the new version."""
    return dataset_actions.register_dataset(ctx, user, name, body)


@router.delete("/datasets/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def remove_dataset(name: PathName, user: User, ctx: Ctx, force: Force = False) -> RemovalResult:
    """Forget a dataset (its owner or an admin); never a source's files. Refused (409, naming
    them) while waiting or running jobs read it, unless ``force``, which stops them."""
    return dataset_actions.remove_dataset(ctx, user, name, force=force)


@router.post("/datasets/{name}/grants", response_model=DatasetView, responses=errors(401, 403, 404, 413, 422))
def grant_dataset(name: PathName, body: DatasetGrantRequest, user: User, ctx: Ctx) -> DatasetView:
    """Let a user, or every member of ``@group``, read the dataset (its owner or an admin)."""
    return dataset_actions.grant_dataset(ctx, user, name, body.grantee)


@router.delete("/datasets/{name}/grants/{grantee}", response_model=DatasetView,
               responses=errors(401, 403, 404, 409, 422))
def revoke_dataset_grant(name: PathName, grantee: PathName, user: User, ctx: Ctx, force: Force = False) -> DatasetView:
    """Take back a grant; refused (409, naming them) while it is what lets waiting or running
    jobs read the dataset, unless ``force``, which stops them."""
    return dataset_actions.revoke_dataset_grant(ctx, user, name, grantee, force=force)
