"""Signing in and out, and the signed-in user's own password and tokens.

Sign-in takes a user name and password, or a token (for users without a password, and for
the admin's first visit: the token in ``$TRAINYARD_HOME/client.json``). Tries are limited
per name and per client address (``services.sign_in_limits``); every failure says the same
thing, so the page does not tell which names exist. Making a token from a browser session
asks for the password (or a token) again.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from trainyard.core.notices import NOTICE_CLASSES
from trainyard.portal.auth import Action, Page, Viewer, confirm_credential, optional_viewer
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.schemas.users import TokenResponse
from trainyard.services import account_actions, notices, passwords, sign_in_limits, web_sessions
from trainyard.services.errors import ServiceError
from trainyard.services.web_sessions import LIFETIME_SECONDS, SignedIn
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID
from trainyard.web.callers import COOKIE, same_origin
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
MaybeViewer = Annotated[Viewer | None, Depends(optional_viewer)]


def _safe_next(target: str | None) -> str:
    """Only a path on this server: never another site (``//evil``, ``https://…``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.get("/signin")
def sign_in_page(request: Request, found: MaybeViewer, next: str = "/") -> Response:  # noqa: A002
    if found is not None:
        return RedirectResponse(_safe_next(next), status_code=303, headers=SECURITY_HEADERS)
    return render(request, "signin.html", next=_safe_next(next))


@router.post("/signin")
def sign_in(
    request: Request,
    ctx: Ctx,
    username: Annotated[str, Form(max_length=64)] = "",
    password: Annotated[str, Form(max_length=passwords.MAX_LENGTH)] = "",
    token: Annotated[str, Form(max_length=256)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/",  # noqa: A002
) -> Response:
    target = _safe_next(next)
    if not same_origin(request):
        return render(request, "signin.html", status_code=403, next=target, username=username,
                      error="this sign-in form came from another site; use this server's own page")
    # The peer's address: X-Forwarded-For only counts from the proxies `trusted_proxies`
    # names (uvicorn's proxy headers, set up in api/server.py), never from anyone else.
    address = request.client.host if request.client else "?"
    by_token = bool(token.strip())
    keys = sign_in_limits.keys_for(address, "" if by_token else username)
    refused = ctx.sign_ins.try_sign_in(keys)  # counted before the password is checked
    if refused is not None:
        wait = int(refused.retry_after) + 1
        return render(request, "signin.html", status_code=429, next=target, username=username,
                      headers={"Retry-After": str(wait)}, error=f"too many failed sign-ins; try again in {wait} s")
    signed_in: SignedIn | None
    if by_token:
        signed_in = account_actions.sign_in_with_token(ctx, token)
    else:
        signed_in = web_sessions.sign_in_with_password(ctx.db, username, password, clock=ctx.clock)
    if signed_in is None:
        return render(request, "signin.html", status_code=401, next=target, username=username,
                      error="wrong user name and password, or token (or the user is disabled)")
    ctx.sign_ins.succeeded(keys, signed_in.user.name)
    response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(COOKIE, signed_in.cookie, max_age=LIFETIME_SECONDS, httponly=True, samesite="lax",
                        secure=request.url.scheme == "https", path="/")
    return response


@router.post("/signout")
def sign_out(request: Request, viewer: Action, ctx: Ctx) -> Response:
    account_actions.sign_out(ctx, request.cookies.get(COOKIE, ""))
    response = RedirectResponse("/signin", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax", secure=request.url.scheme == "https")
    return response


def _account(request: Request, viewer: Viewer, ctx: AppContext, *, status_code: int = 200,
             errors: dict[str, str] | None = None, notice: str | None = None,
             new_token: TokenResponse | None = None, error: str | None = None) -> Response:
    tokens = account_actions.tokens(ctx, viewer.user)
    notify = notices.read_account(ctx.db, viewer.user, None, email_enabled=ctx.email_notices)
    return render(request, "account.html", status_code=status_code, user=viewer.user,
                  web_session=viewer.web_session, errors=errors or {}, notice=notice, tokens=tokens,
                  new_token=new_token, error=error, notify=notify, notice_kinds=NOTICE_CLASSES)


account_page_for = _account  # the account page with an outcome (pages_notices.py)


@router.get("/account")
def account_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _account(request, viewer, ctx)


@router.post("/account/password")
async def change_password(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """Set one's own password; the user's other browser sessions are signed out. The current
    password (a token of theirs, for a user without one) is asked first, and wrong ones count
    against the sign-in limit: a session alone neither guesses nor sets a credential."""
    form = await request.form()
    current, new, again = (str(form.get(k, "")) for k in ("current", "password", "again"))
    errors: dict[str, str] = {}
    status = 422
    try:
        await run_in_threadpool(confirm_credential, request, ctx, viewer, current)
    except ServiceError as exc:
        errors["current"] = exc.message
        status = exc.status if exc.status == 429 else status
    changed: UserRow | None = None
    if errors:
        pass
    elif new != again:
        errors["again"] = "the two new passwords differ"
    else:
        try:
            changed = await run_in_threadpool(account_actions.set_password, ctx, viewer.user, None, new,
                                              current=current, keep=viewer.web_session)
        except ServiceError as exc:
            for item in exc.details or [{"path": "password", "message": exc.message}]:
                errors[item["path"]] = exc.message
    if errors or changed is None:
        return await run_in_threadpool(_account, request, viewer, ctx, status_code=status, errors=errors)
    # The user as they now are: the page says whether they have a password.
    return await run_in_threadpool(_account, request, Viewer(changed, viewer.web_session), ctx,
                                   notice="your password is changed")


@router.post("/account/tokens")
def create_token(request: Request, viewer: Action, ctx: Ctx,
                 name: Annotated[str, Form(max_length=128)] = "",
                 current: Annotated[str, Form(max_length=passwords.MAX_LENGTH)] = "") -> Response:
    """A new token of one's own, shown in this answer only; the password (or a token, for a
    user without one) is asked again: a session alone does not make a credential."""
    try:
        confirm_credential(request, ctx, viewer, current)
    except ServiceError as exc:
        return _account(request, viewer, ctx, status_code=exc.status, error=exc.message,
                        errors={"current": exc.message})
    created = account_actions.issue_token(ctx, viewer.user, for_user=None, name=name)
    return _account(request, viewer, ctx, new_token=created)


@router.post("/account/tokens/{token_id}/revoke")
def revoke_token(request: Request, token_id: Annotated[int, Path(ge=1, le=MAX_ID)], viewer: Action,
                 ctx: Ctx) -> Response:
    try:
        token = account_actions.revoke_token(ctx, viewer.user, token_id)
    except ServiceError as exc:
        return _account(request, viewer, ctx, status_code=exc.status, error=exc.message)
    return _account(request, viewer, ctx,
                    notice=f"revoked token {token.id} ({token.prefix}…): it is refused from now on")
