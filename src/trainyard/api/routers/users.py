"""HTTP routes for users and tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.bodies import BodyRoute
from trainyard.api.deps import AppContext, admin_user, context, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.users import CreateTokenRequest, CreateUserRequest, TokenResponse, UserView
from trainyard.services import auth
from trainyard.services.views import user_view
from trainyard.store.rows import UserRow

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
