"""Signing in and out, and the signed-in user's own password.

Sign-in takes a user name and password, or a token (for users without a password, and for
the admin's first visit: the token in ``$TRAINYARD_HOME/client.json``). Failed tries are
limited per name and per address; every failure says the same thing, so the page does
not tell which names exist.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from trainyard.api.deps import AppContext, context
from trainyard.portal.auth import COOKIE, Action, Page, Viewer, optional_viewer, same_origin
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.services import passwords, web_sessions
from trainyard.services.errors import ServiceError
from trainyard.services.web_sessions import LIFETIME_SECONDS, SignedIn

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
    address = request.client.host if request.client else "?"
    keys = (f"address:{address}",) + ((f"user:{username}",) if username else ())
    wait = ctx.sign_ins.retry_after(*keys)
    if wait > 0:
        return render(request, "signin.html", status_code=429, next=target, username=username,
                      headers={"Retry-After": str(int(wait) + 1)},
                      error=f"too many failed sign-ins; try again in {int(wait) + 1} s")
    signed_in: SignedIn | None
    with ctx.db.session() as session:
        if token.strip():
            signed_in = web_sessions.sign_in_with_token(session, token, clock=ctx.clock)
        else:
            signed_in = web_sessions.sign_in_with_password(session, username.strip(), password, clock=ctx.clock)
    if signed_in is None:
        ctx.sign_ins.failed(*keys)
        return render(request, "signin.html", status_code=401, next=target, username=username,
                      error="wrong user name and password, or token (or the user is disabled)")
    ctx.sign_ins.succeeded(*keys)
    response = RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(COOKIE, signed_in.cookie, max_age=LIFETIME_SECONDS, httponly=True, samesite="lax",
                        secure=request.url.scheme == "https", path="/")
    return response


@router.post("/signout")
def sign_out(request: Request, viewer: Action, ctx: Ctx) -> Response:
    with ctx.db.session() as session:
        web_sessions.sign_out(session, request.cookies.get(COOKIE, ""))
    response = RedirectResponse("/signin", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax", secure=request.url.scheme == "https")
    return response


@router.get("/account")
def account_page(request: Request, viewer: Page) -> Response:
    return render(request, "account.html", user=viewer.user, web_session=viewer.web_session)


@router.post("/account/password")
async def change_password(request: Request, viewer: Action, ctx: Ctx) -> Response:
    form = await request.form()
    current, new, again = (str(form.get(k, "")) for k in ("current", "password", "again"))
    errors: dict[str, str] = {}
    if new != again:
        errors["again"] = "the two new passwords differ"
    else:
        def change() -> None:
            with ctx.db.session() as session:
                web_sessions.change_password(session, viewer.user, None, new, current=current,
                                             keep=viewer.web_session)
        try:
            await run_in_threadpool(change)
        except ServiceError as exc:
            for item in exc.details or [{"path": "password", "message": exc.message}]:
                errors[item["path"]] = exc.message
    if errors:
        return render(request, "account.html", status_code=422, user=viewer.user, web_session=viewer.web_session,
                      errors=errors)
    return render(request, "account.html", user=viewer.user, web_session=viewer.web_session,
                  notice="your password is changed")
