"""HTTP routes for users and tokens: creating, listing, disabling and deleting users (admin);
creating, listing and revoking tokens (one's own; anyone's for an admin)."""

from __future__ import annotations

import contextlib
import pathlib
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.backends.base import EnvironmentStore
from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.requests import NO_NUL
from trainyard.schemas.users import (
    CreateTokenRequest,
    CreateUserRequest,
    PasswordRequest,
    TokenResponse,
    TokenView,
    UserView,
)
from trainyard.services import auth, environments, removal, web_sessions
from trainyard.services.views import token_view, user_view
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, BodyRoute, PathName
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["users"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
Admin = Annotated[UserRow, Depends(admin_user)]
Ctx = Annotated[AppContext, Depends(context)]


@router.get("/me", response_model=UserView, responses=errors(401))
def whoami(user: User) -> UserView:
    return user_view(user)


@router.get("/users", response_model=list[UserView], responses=errors(401, 403))
def list_users(_: Admin, ctx: Ctx) -> list[UserView]:
    with ctx.db.session() as session:
        return [user_view(u) for u in auth.list_users(session)]


@router.post("/users", response_model=UserView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_user(body: CreateUserRequest, _: Admin, ctx: Ctx) -> UserView:
    with ctx.db.session() as session:
        return user_view(auth.create_user(session, body.name, is_admin=body.admin, clock=ctx.clock))


@router.post("/tokens", response_model=TokenResponse, status_code=201,
             responses=errors(401, 403, 404, 413, 422))
def create_token(body: CreateTokenRequest, user: User, ctx: Ctx) -> TokenResponse:
    with ctx.db.session() as session:
        token, owner = auth.issue_token(session, user, for_user=body.user, name=body.name, clock=ctx.clock)
        return TokenResponse(token=token, user=owner.name)


@router.post("/users/{name}/disable", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def disable_user(
    name: PathName, admin: Admin, ctx: Ctx,
    stopJobs: Annotated[bool, Query(description="Also stop the user's waiting and running jobs")] = False,
) -> RemovalResult:
    """Refuse the user's tokens from now on. Their waiting and running jobs go on unless
    ``stopJobs``; `enable` lets them in again."""
    with ctx.db.session() as session:
        result = removal.disable_user(session, name, stop_jobs=stopJobs, by=admin, clock=ctx.clock)
        user_id = auth.get_user(session, name).id
    ctx.tokens.forget(user_ids=[user_id])
    ctx.wake_controller()
    return result


@router.post("/users/{name}/enable", response_model=UserView, responses=errors(401, 403, 404, 422))
def enable_user(name: PathName, _: Admin, ctx: Ctx) -> UserView:
    with ctx.db.session() as session:
        user = removal.enable_user(session, name)
        view = user_view(user)
    ctx.tokens.forget(user_ids=[user.id])
    return view


@router.delete("/users/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_user(
    name: PathName, admin: Admin, ctx: Ctx,
    force: Annotated[bool, Query(description="Stop the user's waiting and running jobs instead of refusing")] = False,
) -> RemovalResult:
    """Delete a user: refused (409, naming the jobs) while they have waiting or running jobs,
    or others' jobs run in an environment of theirs, unless ``force``. Their finished jobs
    keep their name; their tokens are revoked; their custom environments are deleted, files
    and all, and base environments they declared become the caller's."""
    files: list[pathlib.Path] = []
    with ctx.db.session() as session:
        user_id = auth.get_user(session, name).id
        result = removal.delete_user(session, name, force=force, by=admin, clock=ctx.clock, files=files)
    ctx.tokens.forget(user_ids=[user_id])
    ctx.wake_controller()
    for folder in files:  # after the commit: never file I/O inside the transaction
        environments.remove_files(folder.name, folder)
    if isinstance(ctx.backend, EnvironmentStore):  # their own folder of the root, once empty
        with contextlib.suppress(OSError):
            (ctx.backend.environments_root / name).rmdir()
    return result


@router.put("/users/{name}/password", response_model=UserView, responses=errors(401, 403, 404, 413, 422))
def set_password(name: PathName, body: PasswordRequest, user: User, ctx: Ctx) -> UserView:
    """Set a password for signing in to the portal: your own (with ``current`` when you have
    one), or anyone's for an admin (a reset: no current one needed). The user's browser
    sessions are signed out; their tokens keep working."""
    with ctx.db.session() as session:
        view = user_view(target := web_sessions.change_password(session, user, name, body.password,
                                                                current=body.current))
    ctx.tokens.forget(user_ids=[target.id])  # `GET /me` says hasPassword at once
    return view


@router.delete("/users/{name}/password", response_model=UserView, responses=errors(401, 403, 404, 422))
def clear_password(name: PathName, admin: Admin, ctx: Ctx) -> UserView:
    """Remove a user's password (admin): they sign in with a token until one is set again,
    and their browser sessions are signed out."""
    with ctx.db.session() as session:
        view = user_view(target := web_sessions.clear_password(session, admin, name))
    ctx.tokens.forget(user_ids=[target.id])
    return view


@router.get("/tokens", response_model=list[TokenView], responses=errors(401, 403, 404, 422))
def list_tokens(
    user: User, ctx: Ctx,
    owner: Annotated[str | None, Query(alias="user", max_length=64, pattern=NO_NUL,
                                       description="Whose tokens; default: the caller's (admins: anyone's)")] = None,
    every: Annotated[bool, Query(alias="all", description="Every user's tokens (admins only)")] = False,
) -> list[TokenView]:
    """Live tokens, oldest first: never the tokens themselves."""
    with ctx.db.session() as session:
        return [token_view(t) for t in auth.list_tokens(session, user, for_user=owner, every_user=every)]


@router.delete("/tokens/{token_id}", response_model=TokenView, responses=errors(401, 404, 409, 422))
def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_ID)], user: User, ctx: Ctx) -> TokenView:
    """Revoke a token of one's own (anyone's, for an admin); it is refused from the next request."""
    with ctx.db.session() as session:
        token = auth.revoke_token(session, user, token_id)
        view = token_view(token)
        owner_id = token.user_id
    ctx.tokens.forget(user_ids=[owner_id])
    return view
