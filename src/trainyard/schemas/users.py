"""The API's models of users and tokens."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.core.names import USER_NAME
from trainyard.schemas.requests import RequestBody, text_field


class CreateUserRequest(RequestBody):
    name: str = text_field(64, rule=USER_NAME, description="lowercase letters, digits, '_', '.', '-'")
    admin: bool = False


class CreateTokenRequest(RequestBody):
    user: str | None = text_field(64, default=None,
                                  description="Whose token; default: the caller. Admins only for others.")
    name: str = text_field(128, default="", description="A note to recognise the token by")


class PasswordRequest(RequestBody):
    password: str = text_field(1024, description="The new password: 8 to 1024 characters")
    current: str | None = text_field(1024, default=None,
                                     description="Your current password, when you change your own and have one")


class TokenResponse(BaseModel):
    token: str
    user: str


class UserView(BaseModel):
    name: str
    admin: bool
    createdAt: datetime
    disabled: bool = Field(default=False, description="A disabled user's tokens are refused")
    hasPassword: bool = Field(default=False, description="Whether they may sign in to the portal with a password")


class TokenView(BaseModel):
    """A token as listed: never the token itself, which is shown once, at creation."""

    id: int = Field(description="What `DELETE /tokens/{id}` (`yard token revoke ID`) takes")
    user: str
    name: str = Field(description="The note given at creation")
    prefix: str = Field(description="The token's first characters, to recognise it by")
    createdAt: datetime
    lastUsedAt: datetime | None = Field(
        description="Its last use, to within the token cache's 3 s; null if never used")
