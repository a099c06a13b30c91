"""HTTP routes for the cluster: health, nodes and the live view."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.cluster import NodeView, TopView
from trainyard.services import cluster_actions
from trainyard.store.rows import UserRow
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["cluster"])

Ctx = Annotated[AppContext, Depends(context)]


@router.get("/healthz")
def healthz(ctx: Ctx) -> dict[str, str]:
    """Liveness: answers without a token."""
    return {
        "status": "ok",
        "version": version("trainyard"),
        "backend": ctx.backend.name,
        "database": ctx.db.engine.dialect.name,
    }


@router.get("/nodes", response_model=list[NodeView], responses=errors(401))
def list_nodes(user: Annotated[UserRow, Depends(current_user)], ctx: Ctx) -> list[NodeView]:
    """Nodes, their capacity, what is allocated and what their newest samples measured (null:
    not measured, or no sample in the last few sampling intervals); a non-admin sees only
    their own jobs' ids."""
    return cluster_actions.nodes(ctx, user)


@router.get("/top", response_model=TopView, responses=errors(401))
def top(user: Annotated[UserRow, Depends(current_user)], ctx: Ctx) -> TopView:
    """The live view (`yard top`): nodes as `GET /nodes` shows them, and the running jobs the
    caller may see (an admin: all) with their tasks' GPU, CPU and memory use summed, busiest
    GPUs first."""
    return cluster_actions.top(ctx, user)
