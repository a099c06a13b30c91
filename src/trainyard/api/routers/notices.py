"""HTTP routes for job notices: a user's e-mail address and default (their own; anyone's
for an admin), and a job's notices (its owner's or an admin's)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.notices import AccountNotifyView, EmailRequest, JobNoticeView, NotifySettings
from trainyard.services import notices
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["notices"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id")]


@router.get("/users/{name}/notify", response_model=AccountNotifyView, responses=errors(401, 403, 404, 422))
def account_notify(name: PathName, user: User, ctx: Ctx) -> AccountNotifyView:
    """A user's e-mail address and their default notices (your own; anyone's for an admin)."""
    return notices.read_account(ctx.db, user, name, email_enabled=ctx.email_notices)


@router.put("/users/{name}/notify", response_model=AccountNotifyView, responses=errors(401, 403, 404, 413, 422))
def set_account_notify(name: PathName, body: NotifySettings, user: User, ctx: Ctx) -> AccountNotifyView:
    """Set the default for jobs whose file has no `notify` (`on: []` clears it). A webhook
    must reach a public address unless the admin allows its host (`notify_webhook_allow`)."""
    return notices.change_default(ctx.db, user, name, body, ctx.submit_limits.webhook_allow,
                                  email_enabled=ctx.email_notices)


@router.put("/users/{name}/email", response_model=AccountNotifyView, responses=errors(401, 403, 404, 413, 422))
def set_email(name: PathName, body: EmailRequest, user: User, ctx: Ctx) -> AccountNotifyView:
    """Set (null: remove) where a user's job notices are e-mailed: your own, or anyone's for an admin."""
    return notices.change_email(ctx.db, user, name, body.email, email_enabled=ctx.email_notices)


@router.get("/jobs/{job_id}/notices", response_model=list[JobNoticeView], responses=errors(401, 404, 422))
def job_notices(job_id: JobId, user: User, ctx: Ctx) -> list[JobNoticeView]:
    """The job's notices: sent, pending, or failed (with why)."""
    return notices.read_job_notices(ctx.db, user, job_id)
