"""HTTP routes for users and tokens: creating, listing, disabling and deleting users (admin);
creating, listing and revoking tokens (one's own; anyone's for an admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
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
from trainyard.services import account_actions
from trainyard.services.views import user_view
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
    return account_actions.users(ctx)


@router.post("/users", response_model=UserView, status_code=201, responses=errors(401, 403, 409, 413, 422))
def create_user(body: CreateUserRequest, admin: Admin, ctx: Ctx) -> UserView:
    return account_actions.create_user(ctx, admin, body.name, is_admin=body.admin)


@router.post("/tokens", response_model=TokenResponse, status_code=201,
             responses=errors(401, 403, 404, 413, 422))
def create_token(body: CreateTokenRequest, user: User, ctx: Ctx) -> TokenResponse:
    return account_actions.issue_token(ctx, user, for_user=body.user, name=body.name)


@router.post("/users/{name}/disable", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def disable_user(
    name: PathName, admin: Admin, ctx: Ctx,
    stopJobs: Annotated[bool, Query(description="Also stop the user's waiting and running jobs")] = False,
) -> RemovalResult:
    """Refuse the user's tokens from now on. Their waiting and running jobs go on unless
    ``stopJobs``; `enable` lets them in again."""
    return account_actions.disable_user(ctx, admin, name, stop_jobs=stopJobs)


@router.post("/users/{name}/enable", response_model=UserView, responses=errors(401, 403, 404, 422))
def enable_user(name: PathName, _: Admin, ctx: Ctx) -> UserView:
    return account_actions.enable_user(ctx, name)


@router.delete("/users/{name}", response_model=RemovalResult, responses=errors(401, 403, 404, 409, 422))
def delete_user(
    name: PathName, admin: Admin, ctx: Ctx,
    force: Annotated[bool, Query(description="Stop the user's waiting and running jobs instead of refusing")] = False,
) -> RemovalResult:
    """Delete a user: refused (409, naming the jobs) while they have waiting or running jobs,
    or others' jobs run in an environment of theirs, unless ``force``. Their finished jobs
    keep their name; their tokens are revoked; their custom environments are deleted, files
    and all, and base environments they declared become the caller's."""
    return account_actions.delete_user(ctx, admin, name, force=force)


@router.put("/users/{name}/password", response_model=UserView, responses=errors(401, 403, 404, 413, 422))
def set_password(name: PathName, body: PasswordRequest, user: User, ctx: Ctx) -> UserView:
    """Set a password for signing in to the portal: your own (with ``current`` when you have
    one), or anyone's for an admin (a reset: no current one needed). The user's browser
    sessions are signed out; their tokens keep working."""
    return user_view(account_actions.set_password(ctx, user, name, body.password, current=body.current))


@router.delete("/users/{name}/password", response_model=UserView, responses=errors(401, 403, 404, 422))
def clear_password(name: PathName, admin: Admin, ctx: Ctx) -> UserView:
    """Remove a user's password (admin): they sign in with a token until one is set again,
    and their browser sessions are signed out."""
    return user_view(account_actions.clear_password(ctx, admin, name))


@router.get("/tokens", response_model=list[TokenView], responses=errors(401, 403, 404, 422))
def list_tokens(
    user: User, ctx: Ctx,
    owner: Annotated[str | None, Query(alias="user", max_length=64, pattern=NO_NUL,
                                       description="Whose tokens; default: the caller's (admins: anyone's)")] = None,
    every: Annotated[bool, Query(alias="all", description="Every user's tokens (admins only)")] = False,
) -> list[TokenView]:
    """Live tokens, oldest first: never the tokens themselves."""
    return account_actions.tokens(ctx, user, for_user=owner, every_user=every)


@router.delete("/tokens/{token_id}", response_model=TokenView, responses=errors(401, 404, 409, 422))
def revoke_token(token_id: Annotated[int, Path(ge=1, le=MAX_ID)], user: User, ctx: Ctx) -> TokenView:
    """Revoke a token of one's own (anyone's, for an admin); it is refused from the next request."""
    return account_actions.revoke_token(ctx, user, token_id)
