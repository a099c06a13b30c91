"""The users page (admins): users with their state, password and tokens; creating,
disabling, enabling and deleting users, resetting passwords, issuing and revoking anyone's
tokens; groups and their members; per-user GPU quotas.

Every change calls the use case ``api/routers/users.py`` or ``admin.py`` calls
(``services/account_actions.py``, ``cluster_actions.py``). A new
token is shown once, in the answer to the request that made it, and never again.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import Response

from trainyard.core.priorities import PRIORITY_NAMES
from trainyard.portal.auth import AdminAction, AdminPage, Viewer, confirm_credential
from trainyard.portal.changes import refusal_values, removal_notice
from trainyard.portal.templating import render
from trainyard.schemas.requests import NO_NUL
from trainyard.schemas.users import TokenResponse
from trainyard.services import account_actions, cluster_actions
from trainyard.services.errors import Invalid, ServiceError
from trainyard.web.bodies import MAX_ID, PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
Flag = Annotated[bool, Form()]
Password = Annotated[str, Form(max_length=1024)]
UserName = Annotated[str, Form(max_length=64)]
TOKENS_SHOWN = 100  # the newest; a bigger list is asked per user


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, retry: dict[str, str] | None = None,
          new_token: TokenResponse | None = None, form: dict[str, str] | None = None,
          tokens_of: str | None = None) -> Response:
    users = account_actions.users(ctx)
    groups = cluster_actions.groups(ctx)
    quotas = cluster_actions.user_quotas(ctx)
    every = account_actions.tokens(ctx, viewer.user, for_user=tokens_of, every_user=not tokens_of)
    return render(request, "users.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, users=users,
                  groups=[(g.name, g.members) for g in groups], quotas=quotas, tokens=every[-TOKENS_SHOWN:],
                  tokens_total=len(every), tokens_of=tokens_of, priorities=PRIORITY_NAMES, new_token=new_token,
                  notice=notice, form=form or {}, **refusal_values(failed, retry))


@router.get("/users")
def users_page(request: Request, viewer: AdminPage, ctx: Ctx,
               tokens: Annotated[str, Query(max_length=64, pattern=NO_NUL)] = "") -> Response:
    """``tokens``: one user's tokens (default: everyone's, the newest ``TOKENS_SHOWN``)."""
    return _page(request, viewer, ctx, tokens_of=tokens or None)


@router.post("/users/account")
def user_account(request: Request, viewer: AdminAction, ctx: Ctx, user: UserName,
                 do: Annotated[str, Form(pattern="^(password|clear|token)$")], password: Password = "",
                 token_name: Annotated[str, Form(max_length=128)] = "", current: Password = "") -> Response:
    """The page's one form for a user's password (reset or remove) and tokens (create)."""
    if do == "token":
        return issue_token(request, user, viewer, ctx, token_name, current)
    if do == "clear":
        return clear_password(request, user, viewer, ctx)
    return reset_password(request, user, viewer, ctx, password, current)


@router.post("/users")
def create_user(request: Request, viewer: AdminAction, ctx: Ctx, name: UserName, admin_flag: Annotated[
        bool, Form(alias="admin")] = False, password: Password = "", current: Password = "") -> Response:
    """A new user, with a first password if one is given (else they sign in with a token). A
    password is a credential: the admin gives their own again first, as for a token."""
    name = name.strip()
    try:
        if password:
            confirm_credential(request, ctx, viewer, current)
        account_actions.create_user(ctx, viewer.user, name, is_admin=admin_flag, password=password)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form={"name": name})
    how = "a password" if password else "a token (issue one below)"
    return _page(request, viewer, ctx, notice=f"created user {name}; they sign in with {how}")


@router.post("/users/{name}/disable")
def disable_user(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
                 stop_jobs: Flag = False) -> Response:
    try:
        result = account_actions.disable_user(ctx, viewer.user, name, stop_jobs=stop_jobs)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=removal_notice(result) + f"; {name} cannot sign in until enabled")


@router.post("/users/{name}/enable")
def enable_user(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx) -> Response:
    try:
        account_actions.enable_user(ctx, name)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"enabled user {name}: they may sign in again")


@router.post("/users/{name}/delete")
def delete_user(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, force: Flag = False) -> Response:
    try:
        result = account_actions.delete_user(ctx, viewer.user, name, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, retry={"action": f"/users/{quote(name)}/delete"})
    return _page(request, viewer, ctx, notice=removal_notice(result))


@router.post("/users/{name}/password")
def reset_password(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
                   password: Password, current: Password = "") -> Response:
    """Set a user's password (one's own included), once the admin has given their own password
    (or a token of theirs) again: else a stolen admin session would make itself a login that
    outlives it, setting its own password or another admin's."""
    try:
        confirm_credential(request, ctx, viewer, current)
        account_actions.set_password(ctx, viewer.user, name, password, keep=viewer.web_session)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form={"user": name})
    return _page(request, viewer, ctx, notice=f"set {name}'s password; their browser sessions ended")


@router.post("/users/{name}/password/clear")
def clear_password(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx) -> Response:
    try:
        account_actions.clear_password(ctx, viewer.user, name)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"removed {name}'s password: they sign in with a token")


@router.post("/users/{name}/tokens")
def issue_token(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx,
                note: Annotated[str, Form(alias="name", max_length=128)] = "", current: Password = "") -> Response:
    """A token for a user, once the admin has given their own password (or a token of
    theirs) again: a browser session alone does not make credentials."""
    try:
        confirm_credential(request, ctx, viewer, current)
        created = account_actions.issue_token(ctx, viewer.user, for_user=name, name=note)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, new_token=created)


@router.post("/users/tokens/{token_id}/revoke")
def revoke_token(request: Request, token_id: Annotated[int, Path(ge=1, le=MAX_ID)], viewer: AdminAction,
                 ctx: Ctx) -> Response:
    try:
        token = account_actions.revoke_token(ctx, viewer.user, token_id)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"revoked token {token.id} of {token.user} ({token.prefix}…)")


@router.post("/users/quotas")
def set_quota(request: Request, viewer: AdminAction, ctx: Ctx, name: UserName,
              priority: Annotated[str, Form(max_length=16)],
              gpus: Annotated[str, Form(max_length=32)] = "") -> Response:
    """At most ``gpus`` GPUs for the user at ``priority``; empty removes the limit."""
    try:
        limit = _gpus(gpus)
        cluster_actions.set_user_quota(ctx, name, priority=priority, gpus=limit)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    said = f"at most {limit:g} GPUs" if limit is not None else "no limit"
    return _page(request, viewer, ctx, notice=f"{name} at {priority}: {said}")


def _gpus(text: str) -> float | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1_000_000:
        raise Invalid(f"GPUs must be a number from 0 to 1000000, or empty for no limit; got {text!r}",
                      details=[{"path": "gpus", "message": "a number ≥ 0, or empty"}])
    return value


@router.post("/users/groups")
def create_group(request: Request, viewer: AdminAction, ctx: Ctx,
                 name: Annotated[str, Form(max_length=64)]) -> Response:
    try:
        cluster_actions.create_group(ctx, name.strip())
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form={"group": name})
    return _page(request, viewer, ctx, notice=f"created group {name.strip()}")


@router.post("/users/groups/{group}/members")
def add_member(request: Request, group: PathName, viewer: AdminAction, ctx: Ctx, name: UserName) -> Response:
    try:
        cluster_actions.add_member(ctx, group, name)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, notice=f"{name} is in group {group}")


@router.post("/users/groups/{group}/members/remove")
def remove_member(request: Request, group: PathName, viewer: AdminAction, ctx: Ctx, name: UserName,
                  force: Flag = False) -> Response:
    try:
        result = cluster_actions.remove_member(ctx, viewer.user, group, name, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     retry={"action": f"/users/groups/{quote(group)}/members/remove", "name": name})
    return _page(request, viewer, ctx, notice=removal_notice(result))
