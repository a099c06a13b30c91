"""The API's models of users and tokens."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from trainyard.core.names import USER_NAME
from trainyard.schemas.requests import RequestBody, text_field


class CreateUserRequest(RequestBody):
    name: str = text_field(64, rule=USER_NAME, description="lowercase letters, digits, '_', '.', '-'")
    admin: bool = False


class CreateTokenRequest(RequestBody):
    user: str | None = text_field(64, default=None,
                                  description="Whose token; default: the caller. Admins only for others.")
    name: str = text_field(128, default="", description="A note to recognise the token by")


class TokenResponse(BaseModel):
    token: str
    user: str


class UserView(BaseModel):
    name: str
    admin: bool
    createdAt: datetime
