"""HTTP routes for alerts: list them, tune the rules (admin), the rules as a Prometheus
file, and stop the job an alert flagged (admin). Parsing and permissions only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import PlainTextResponse

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.api.routers.jobs import get_job
from trainyard.schemas.alerts import AlertRuleUpdate, AlertRuleView, AlertView
from trainyard.schemas.jobs import JobDetail
from trainyard.services import cluster_actions, job_actions
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, BodyRoute
from trainyard.web.context import AppContext, context

router = APIRouter(prefix="/alerts", tags=["alerts"], route_class=BodyRoute)

Admin = Annotated[UserRow, Depends(admin_user)]
User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
RuleName = Annotated[str, Path(max_length=64, description="The rule, e.g. idle-gpu-job")]


@router.get("", response_model=list[AlertView], responses=errors(401, 422))
def list_alerts(
    user: User, ctx: Ctx,
    include_resolved: Annotated[bool, Query(alias="all", description="Resolved alerts too")] = False,
) -> list[AlertView]:
    """Alerts, newest first: firing ones (``all=true``: resolved too). An admin sees every
    alert; a user, the alerts about their own jobs."""
    return cluster_actions.alerts(ctx, user, include_resolved=include_resolved)


@router.get("/rules", response_model=list[AlertRuleView], responses=errors(401, 403))
def list_rules(_: Admin, ctx: Ctx) -> list[AlertRuleView]:
    """The rules with their thresholds, enablement and cordoning (admin)."""
    return cluster_actions.alert_rules(ctx)


RULES_FILE = {"description": "A Prometheus alerting-rules file (YAML)",
              "content": {"text/plain": {"schema": {"type": "string"}}}}


@router.get("/rules.yml", response_model=None, responses={200: RULES_FILE, **errors(401, 403)})
def prometheus_rules(_: Admin, ctx: Ctx) -> PlainTextResponse:
    """The enabled rules with their current thresholds as a Prometheus alerting-rules file."""
    return PlainTextResponse(cluster_actions.prometheus_rules(ctx))


@router.put("/rules/{name}", response_model=AlertRuleView, responses=errors(401, 403, 404, 422))
def set_rule(name: RuleName, body: AlertRuleUpdate, _: Admin, ctx: Ctx) -> AlertRuleView:
    """Change a rule; the controller's next evaluation uses it (no restart)."""
    return cluster_actions.set_alert_rule(ctx, name, body)


@router.post("/{alert_id}/stop", response_model=JobDetail, responses=errors(401, 403, 404, 409, 422))
def stop_flagged_job(
    alert_id: Annotated[int, Path(ge=1, le=MAX_ID)], user: Admin, ctx: Ctx
) -> JobDetail:
    """Stop the job an alert is about (admin); its owner reads why in the job's message."""
    return get_job(job_actions.stop_flagged(ctx, user, alert_id), user, ctx)
