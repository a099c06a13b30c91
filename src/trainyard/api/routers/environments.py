"""HTTP routes for environments (``yard env``): create, list, show, delete. Parsing and
permissions only; the rules are ``services/environments.py``'s."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.environments import CreateEnvironmentRequest, EnvironmentView
from trainyard.services import cluster_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(prefix="/environments", tags=["environments"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]


@router.post("", response_model=EnvironmentView, status_code=201, responses=errors(401, 403, 404, 409, 413, 422))
def create_environment(body: CreateEnvironmentRequest, user: User, ctx: Ctx) -> EnvironmentView:
    """Build a custom environment from ``requirements`` (optionally on a ``base``) as a job of
    yours (its id: ``buildJobId``; it is BUILDING until that job ends), or, as an admin,
    declare a base environment (``basePath`` or ``image``), READY at once."""
    return cluster_actions.create_environment(ctx, user, body)


@router.get("", response_model=list[EnvironmentView], responses=errors(401))
def list_environments(user: User, ctx: Ctx) -> list[EnvironmentView]:
    """The environments you may run jobs in: yours, those shared with a group of yours, and
    the base ones (an admin: all)."""
    return cluster_actions.environment_views(ctx, user)


@router.get("/{name}", response_model=EnvironmentView, responses=errors(401, 404, 422))
def show_environment(name: PathName, user: User, ctx: Ctx) -> EnvironmentView:
    return cluster_actions.environment_view(ctx, user, name)


@router.delete("/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_environment(
    name: PathName, user: User, ctx: Ctx,
    force: Annotated[bool, Query(description="Delete it even while jobs use it or it is being built "
                                             "(its build is stopped)")] = False,
) -> RemovalResult:
    """Delete an environment you own (admins: any) and, for a custom one, its files."""
    deleted = cluster_actions.delete_environment(ctx, user, name, force=force)
    return RemovalResult(done=f"deleted environment {name}", stoppedJobs=deleted.stopped_jobs, keptJobs=[])
