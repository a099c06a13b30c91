"""The API's request dependencies: who is calling, by bearer token."""

from __future__ import annotations

from fastapi import Depends, HTTPException
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainyard.store.rows import UserRow
from trainyard.web.context import AppContext, context

# Declares the bearer scheme in the OpenAPI document (the "Authorize" button of /docs);
# the errors stay ours, so it does not refuse requests by itself.
bearer = HTTPBearer(
    auto_error=False,
    description="A Trainyard token: `yard token create`, or the admin's in $TRAINYARD_HOME/client.json",
)


async def current_user(
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer), ctx: AppContext = Depends(context)
) -> UserRow:
    token = credentials.credentials if credentials is not None else ""
    if not token.strip():
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(the CLI reads TRAINYARD_TOKEN or $TRAINYARD_HOME/client.json)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    user = ctx.tokens.known(token.strip()) or await run_in_threadpool(ctx.tokens.user_for_token, token.strip())
    if user is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    if user.disabled:
        raise HTTPException(401, f"user {user.name} is disabled; an admin can enable it again "
                                 f"(`yard user enable {user.name}`)", headers={"WWW-Authenticate": "Bearer"})
    return user


async def admin_user(user: UserRow = Depends(current_user)) -> UserRow:
    if not user.is_admin:
        raise HTTPException(403, "this needs an admin")
    return user
