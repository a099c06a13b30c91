"""Who is looking at a page: the signed-in browser's session and user, page dependencies
that send the signed-out to the sign-in page and refuse non-admins, and the check every
state-changing request passes (its session's form secret, and a same-origin request).

The portal uses the same services, and so the same permission checks, as the API: a page
can do nothing its user's token could not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool

from trainyard.services import account_actions, sign_in_limits, web_sessions
from trainyard.services.errors import Forbidden, ServiceError
from trainyard.store.rows import UserRow, WebSessionRow
from trainyard.web.bodies import MAX_JOB_FILE_BYTES
from trainyard.web.callers import COOKIE, CSRF_FIELD, CSRF_HEADER, same_origin
from trainyard.web.context import AppContext, context, context_of


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        self.next_path = next_path


class PageForbidden(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class CrossSiteRefused(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


@dataclass(frozen=True)
class Viewer:
    user: UserRow
    web_session: WebSessionRow

    @property
    def csrf(self) -> str:
        return self.web_session.csrf_token


def _lookup(ctx: AppContext, cookie: str) -> Viewer | None:
    row = web_sessions.signed_in(ctx.db, cookie, clock=ctx.clock)
    return None if row is None else Viewer(row.user, row)


async def optional_viewer(request: Request, ctx: AppContext = Depends(context)) -> Viewer | None:
    cookie = request.cookies.get(COOKIE, "")
    return await run_in_threadpool(_lookup, ctx, cookie) if cookie else None


async def viewer(request: Request, found: Viewer | None = Depends(optional_viewer)) -> Viewer:
    if found is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return found


async def admin_viewer(found: Viewer = Depends(viewer)) -> Viewer:
    if not found.user.is_admin:
        raise PageForbidden("this page is for admins")
    return found


# The most a page's form may post: a job file twice over (the Submit page's YAML and its
# form), except where it carries a working directory's archive (``/submit/workdir``).
FORM_MAX_BYTES = 2 * MAX_JOB_FILE_BYTES + (256 << 10)
UPLOAD_PATHS = frozenset({"/submit/workdir"})


def bounded_form(request: Request) -> None:
    """Refuse a form whose declared length is past what its page takes (413), or that
    declares none (411: a chunked body would be read without a bound)."""
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():
        raise HTTPException(411, "a form must declare its Content-Length")
    limit = FORM_MAX_BYTES
    if request.url.path in UPLOAD_PATHS:
        store = context_of(request).workdirs
        limit += store.max_bytes + (store.max_bytes >> 3) + (4 << 20)
    if int(declared) > limit:
        raise HTTPException(413, f"the form is larger than {limit >> 20} MiB, more than this page takes")


async def checked(request: Request, found: Viewer = Depends(viewer)) -> Viewer:
    """The viewer of a state-changing request that carries its session's secret (form field
    ``csrf`` or header ``X-CSRF-Token``) and comes from this server's own pages."""
    offered = request.headers.get(CSRF_HEADER)
    if offered is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        bounded_form(request)  # before a byte of it is parsed (and its files spooled to disk)
        form = await request.form()
        value = form.get(CSRF_FIELD)
        offered = value if isinstance(value, str) else None
    if not same_origin(request) or not web_sessions.csrf_matches(found.web_session, offered):
        raise CrossSiteRefused("this form is out of date or came from another site; reload the page and try again")
    return found


async def checked_admin(found: Viewer = Depends(checked)) -> Viewer:
    if not found.user.is_admin:
        raise PageForbidden("only an admin may do this")
    return found


class TooManyTries(ServiceError):
    status = 429


def confirm_credential(request: Request, ctx: AppContext, found: Viewer, secret: str) -> None:
    """Before a browser session makes a new credential (a token, a password): ``secret`` must be its
    user's password, or a live token of theirs (a user without a password). Wrong tries
    count against the same limit as sign-in's, so this is no way around it. Raises
    Forbidden (wrong) or TooManyTries, each naming the field ``current``."""
    address = request.client.host if request.client else "?"
    keys = sign_in_limits.keys_for(address, found.user.name)
    refused = ctx.sign_ins.try_sign_in(keys)
    if refused is not None:
        wait = int(refused.retry_after) + 1
        raise TooManyTries(f"too many wrong passwords; try again in {wait} s",
                           details=[{"path": "current", "message": f"try again in {wait} s"}])
    if not account_actions.reauthenticated(ctx, found.user, secret):
        raise Forbidden("give your password again (a token of yours, if you have no password) to create a token "
                        "or set a password", details=[{"path": "current", "message": "your password, to create a "
                                                                                      "token or set a password"}])
    ctx.sign_ins.succeeded(keys, found.user.name)


Page = Annotated[Viewer, Depends(viewer)]
AdminPage = Annotated[Viewer, Depends(admin_viewer)]
Action = Annotated[Viewer, Depends(checked)]
AdminAction = Annotated[Viewer, Depends(checked_admin)]
