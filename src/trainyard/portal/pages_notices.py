"""The account page's "Job notices": one's e-mail address and the default notices for jobs
whose file has no ``notify`` (the same rules as ``yard account``: ``services.notices``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import ValidationError

from trainyard.portal import pages_account
from trainyard.portal.auth import Action
from trainyard.schemas.notices import NotifySettings
from trainyard.services import notices
from trainyard.services.errors import ServiceError
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
MAX_FIELD = 2000


@router.post("/account/notices")
async def set_notices(request: Request, viewer: Action, ctx: Ctx) -> Response:
    form = await request.form()
    address = str(form.get("email", ""))[:MAX_FIELD].strip()
    webhook = str(form.get("webhook", ""))[:MAX_FIELD].strip()
    on = [str(v) for v in form.getlist("on")][:10]
    by_email = form.get("send_email") == "on"
    errors: dict[str, str] = {}
    try:
        await run_in_threadpool(notices.change_email, ctx.db, viewer.user, None, address or None,
                                email_enabled=ctx.email_notices)
    except ServiceError as exc:
        errors["notify-email"] = exc.details[0]["message"] if exc.details else exc.message
    if not errors:
        try:
            settings = NotifySettings(on=on, email=by_email, webhook=webhook or None)
            await run_in_threadpool(notices.change_default, ctx.db, viewer.user, None, settings,
                                    ctx.submit_limits.webhook_allow, email_enabled=ctx.email_notices)
        except ValidationError as exc:
            errors["notify-webhook"] = "; ".join(str(e["msg"]) for e in exc.errors())
        except ServiceError as exc:
            for item in exc.details or [{"path": "on", "message": exc.message}]:
                errors[f"notify-{item['path']}"] = item["message"]
    if errors:
        return await run_in_threadpool(pages_account.account_page_for, request, viewer, ctx, status_code=422,
                                       errors=errors, error="your job notices are not changed: see below")
    return await run_in_threadpool(pages_account.account_page_for, request, viewer, ctx,
                                   notice="your job notices are saved")
