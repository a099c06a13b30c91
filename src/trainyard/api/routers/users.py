"""HTTP routes for users and tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from trainyard.api.bodies import BodyRoute, RequestBody, text_field
from trainyard.api.deps import AppContext, admin_user, context, current_user
from trainyard.api.openapi import errors
from trainyard.services import auth
from trainyard.services.errors import Forbidden
from trainyard.services.views import UserView, user_view
from trainyard.store.rows import UserRow

router = APIRouter(tags=["users"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
Admin = Annotated[UserRow, Depends(admin_user)]
Ctx = Annotated[AppContext, Depends(context)]


class CreateUserRequest(RequestBody):
    name: str = text_field(64, rule=auth.USER_NAME, description="lowercase letters, digits, '_', '.', '-'")
    admin: bool = False


class CreateTokenRequest(RequestBody):
    user: str | None = text_field(64, default=None,
                                  description="Whose token; default: the caller. Admins only for others.")
    name: str = text_field(128, default="", description="A note to recognise the token by")


class TokenResponse(BaseModel):
    token: str
    user: str


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
        if body.user and body.user != user.name and not user.is_admin:
            raise Forbidden("only an admin may create tokens for another user")
        owner = auth.get_user(session, body.user) if body.user else session.merge(user)
        token = auth.create_token(session, owner, by=user, name=body.name, clock=ctx.clock)
        return TokenResponse(token=token, user=owner.name)
