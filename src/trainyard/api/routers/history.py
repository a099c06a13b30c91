"""HTTP routes for the monitoring history: a job's figures per task, a node's. Parsing and
permissions only (``services/history.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.history import JobMetrics, NodeMetrics
from trainyard.services import cluster_actions, job_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["monitoring"])

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
SINCE_HELP = ("Start of the window: a time (ISO 8601; UTC unless it says) or a duration before now "
              "(90m, 1h, 7d); default: an hour before `until`")
UNTIL_HELP = "End of the window, as `since`; default: now"
Since = Annotated[str | None, Query(max_length=64, description=SINCE_HELP)]
Until = Annotated[str | None, Query(max_length=64, description=UNTIL_HELP)]


@router.get("/jobs/{job_id}/metrics", response_model=JobMetrics, responses=errors(401, 404, 422))
def job_metrics(
    job_id: Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id")],
    user: User,
    ctx: Ctx,
    since: Since = None,
    until: Until = None,
    task: Annotated[str | None, Query(max_length=80, description="ROLE/INDEX, e.g. worker/1; default: all")] = None,
) -> JobMetrics:
    """A job's CPU, memory and GPU figures per task over a window, at the finest resolution the
    history keeps for it (at most 500 points a task); your own jobs (an admin: anyone's)."""
    return job_actions.job_metrics(ctx, user, job_id, since=since, until=until, task=task)


@router.get("/nodes/{name}/metrics", response_model=NodeMetrics, responses=errors(401, 404, 422))
def node_metrics(name: PathName, _: User, ctx: Ctx, since: Since = None, until: Until = None) -> NodeMetrics:
    """A node's CPU, memory, disk, network and per-GPU figures over a window. They name no job or
    user, so every signed-in user may see them (as ``GET /nodes`` shows everyone the allocation);
    what each job uses is its owner's and the admins' to see (``/jobs/{id}/metrics``)."""
    return cluster_actions.node_metrics(ctx, name, since=since, until=until)
