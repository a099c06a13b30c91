"""HTTP route for usage accounting: ``GET /usage`` (who used what, like Slurm's ``sreport``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.requests import NO_NUL
from trainyard.schemas.usage import UsageGrouping, UsageReport
from trainyard.services import cluster_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["usage"])

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]


def Name(description: str) -> Any:  # noqa: N802 - used like FastAPI's Query
    """A name in the query string: bounded, and without NUL (PostgreSQL cannot store it)."""
    return Query(max_length=64, pattern=NO_NUL, description=description)


@router.get("/usage", response_model=UsageReport, responses=errors(401, 403, 404, 422))
def usage(
    caller: User,
    ctx: Ctx,
    by: Annotated[UsageGrouping, Query(description="What each line adds up")] = "user",
    since: Annotated[datetime | None, Query(description="Start of the period (ISO 8601; UTC when no zone); "
                                                        "default: a week before until")] = None,
    until: Annotated[datetime | None, Query(description="End of the period, excluded; default: now")] = None,
    user: Annotated[str | None, Name(description="Only this user's jobs (yourself, or anyone for an admin)")] = None,
    vc: Annotated[str | None, Name(description="Only jobs in this virtual cluster")] = None,
    group: Annotated[str | None, Name(description="Only jobs of this group's members")] = None,
    job: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Only this job")] = None,
) -> UsageReport:
    """GPU-, CPU- and memory-hours allocated in ``[since, until)``, with GPU and CPU
    efficiency (used / allocated, from monitoring; null when nothing was measured). Admins
    see everyone; others only their own jobs, and asking for another user is refused."""
    return cluster_actions.usage(ctx, caller, by=by, since=since, until=until, user=user, vc=vc, group=group,
                                 job_id=job)
