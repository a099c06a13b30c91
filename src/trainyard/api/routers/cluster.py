"""HTTP routes for the cluster: health and nodes."""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.deps import AppContext, context, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.cluster import NodeView
from trainyard.services import jobs as job_service
from trainyard.services.views import node_view
from trainyard.store.rows import UserRow

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
    """Nodes, their capacity and what is used; a non-admin sees only their own jobs' ids."""
    with ctx.db.session() as session:
        tasks = job_service.active_tasks(session)
        visible = job_service.visible_job_ids(session, user, {t.job_id for t in tasks})
        return [node_view(n, tasks, visible) for n in job_service.list_nodes(session)]
