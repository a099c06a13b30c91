"""The real API app in process, on a real database, with a local backend that launches
nothing (no controller runs): an admin, a plain user ("alice"), and their tokens."""

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
    return Api(create_app(ctx), ctx, admin_token, user_token)
