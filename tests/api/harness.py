"""The real API app in process, on a real database, with a local backend that launches
nothing (no controller runs): an admin, a plain user ("alice"), and their tokens.

The app itself is made once per process and lent to one test at a time with that test's
context (``app_for``): FastAPI builds each included router's routes (their models, their
dependencies) for an app the first time a request reaches that router, 15-20 ms a router,
and a test that reached five routers paid that on every fresh app. An app keeps nothing of
its own between requests but ``app.state.ctx`` (the store, the backend, the caches: all the
test's), so the test sees what a fresh app would show it. The apps lent are given back at
the end of each test (``return_apps``, from tests/conftest.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from trainyard.api.app import create_app
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.client import Client
from trainyard.controller.inventory import sync_inventory
from trainyard.core.clock import Clock, SystemClock
from trainyard.services.auth import bootstrap_admin, create_token, create_user
from trainyard.web.context import AppContext


@dataclass
class Api:
    app: FastAPI
    ctx: AppContext
    admin_token: str
    user_token: str

    def client(self, token: str | None = None) -> TestClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return TestClient(self.app, headers=headers, raise_server_exceptions=False)

    @property
    def admin(self) -> TestClient:
        return self.client(self.admin_token)

    @property
    def user(self) -> TestClient:
        return self.client(self.user_token)

    def sdk(self, token: str | None) -> Client:
        """The real SDK, its HTTP carried in process to this app (no socket, no server)."""
        sdk = Client("http://testserver", token)
        sdk._http.close()
        sdk._http = TestClient(self.app, base_url="http://testserver/api/v1", headers=dict(sdk._http.headers),
                               raise_server_exceptions=False)
        return sdk


def make_api(db, state_dir, clock: Clock | None = None, **backend_options: Any) -> Api:
    clock = clock or SystemClock()
    backend = LocalBackend(state_dir, gpus=simulated_gpus(4), cpu_milli=8000, memory_mb=16384, **backend_options)
    with db.session() as session:
        sync_inventory(session, backend.name, backend.inventory(), clock)
        admin_token = bootstrap_admin(session, clock=clock)
        alice = create_user(session, "alice", is_admin=False, clock=clock)
        user_token = create_token(session, alice, by=alice, clock=clock)
    ctx = AppContext(db=db, backend=backend, clock=clock)
    return Api(app_for(ctx), ctx, admin_token, user_token)


_IDLE: list[FastAPI] = []  # apps made in this process that no test holds
_LENT: list[FastAPI] = []  # apps the running test holds


def app_for(ctx: AppContext) -> FastAPI:
    """An app on ``ctx`` as ``create_app(ctx)`` makes it: an idle one of this process's, its
    context replaced (and what ``create_app`` sets on a context, set on this one), or a new one.
    Two calls in one test get two apps."""
    if not _IDLE:
        app = create_app(ctx)
    else:
        app = _IDLE.pop()
        ctx.error_page = app.state.ctx.error_page
        app.state.ctx = ctx
    _LENT.append(app)
    return app


def return_apps() -> None:
    """The end of a test: the apps it held may be lent again."""
    _IDLE.extend(_LENT)
    _LENT.clear()
