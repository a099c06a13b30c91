"""Request dependencies: the app's services container and who is calling."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Depends, HTTPException, Request
from trainyard.backends.base import Backend
from trainyard.controller.loop import Controller
from trainyard.core.clock import Clock
from trainyard.services.auth import authenticate
from trainyard.store.db import Database
from trainyard.store.rows import UserRow


@dataclass
class AppContext:
    db: Database
    backend: Backend
    clock: Clock
    controller: Controller | None = None

    def wake_controller(self) -> None:
        if self.controller is not None:
            self.controller.wake()


def context(request: Request) -> AppContext:
    return request.app.state.ctx


def current_user(request: Request, ctx: AppContext = Depends(context)) -> UserRow:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(the CLI reads TRAINYARD_TOKEN or $TRAINYARD_HOME/client.json)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    with ctx.db.session() as s:
        user = authenticate(s, token.strip())
    if user is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return user


def admin_user(user: UserRow = Depends(current_user)) -> UserRow:
    if not user.is_admin:
        raise HTTPException(403, "this needs an admin")
    return user
