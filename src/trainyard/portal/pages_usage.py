"""The usage page: GPU-hours by user, VC, group or job over a period (presets: today, 7 and
30 days, or since/until), with GPU efficiency, CPU-hours and memory-hours.

The report is ``services.usage.usage_report``, as ``GET /api/v1/usage`` answers it: an admin
sees everyone's, anyone else only their own jobs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, get_args

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from trainyard.portal.auth import Page
from trainyard.portal.templating import render
from trainyard.schemas.requests import NO_NUL
from trainyard.schemas.usage import UsageGrouping
from trainyard.services import cluster_actions
from trainyard.services.errors import Invalid, ServiceError
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
Text = Annotated[str, Query(max_length=64, pattern=NO_NUL)]
GROUPINGS: tuple[str, ...] = get_args(UsageGrouping)
PRESETS = {"today": "Today", "7d": "7 days", "30d": "30 days"}


def _moment(field: str, text: str) -> datetime | None:
    """A date or date and time from the form (UTC when no zone is given); None if empty."""
    if not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise Invalid(f"{field} {text!r} is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM",
                      details=[{"path": field, "message": "not a date"}]) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def preset_since(preset: str, now: datetime) -> datetime | None:
    if preset == "today":
        return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    days = {"7d": 7, "30d": 30}.get(preset)
    return now - timedelta(days=days) if days else None


@router.get("/usage")
def usage_page(request: Request, viewer: Page, ctx: Ctx, by: Text = "user", period: Text = "7d",
               since: Text = "", until: Text = "", user: Text = "", vc: Text = "", group: Text = "") -> Response:
    now = ctx.clock.now()
    form = {"by": by, "period": period, "since": since, "until": until, "user": user, "vc": vc, "group": group}
    report, failed = None, None
    try:
        if by not in GROUPINGS:
            raise Invalid(f"by {by!r}: use one of {', '.join(GROUPINGS)}",
                          details=[{"path": "by", "message": "unknown grouping"}])
        start = _moment("since", since) or preset_since(period, now)
        report = cluster_actions.usage(
            ctx, viewer.user, by=by,  # type: ignore[arg-type]  # checked against GROUPINGS above
            since=start, until=_moment("until", until), now=now,
            user=user.strip() or None, vc=vc.strip() or None, group=group.strip() or None)
    except ServiceError as exc:
        failed = exc
    vcs = [v.name for v in cluster_actions.vcs(ctx, viewer.user)]
    groups = [g.name for g in cluster_actions.groups(ctx)] if viewer.user.is_admin else []
    return render(request, "usage.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, report=report, form=form, groupings=GROUPINGS,
                  presets=PRESETS, vcs=vcs, groups=groups, error=failed.message if failed else None,
                  errors={d["path"]: d["message"] for d in failed.details} if failed else {})
