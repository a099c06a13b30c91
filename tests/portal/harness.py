"""The portal in process: the API harness with passwords, and a client that acts as a browser."""

from __future__ import annotations

import re

from api.harness import Api, make_api
from fastapi.testclient import TestClient

from trainyard.core.clock import Clock
from trainyard.services.auth import get_user
from trainyard.services.passwords import set_password

PASSWORDS = {"admin": "admin password", "alice": "alice password"}


def make_portal_api(db, state_dir, clock: Clock | None = None) -> Api:
    """The API harness's app (an admin and "alice"), each with a password (``PASSWORDS``)."""
    api = make_api(db, state_dir, clock)
    with db.session() as session:
        for name, password in PASSWORDS.items():
            set_password(session, get_user(session, "admin"), name, password)
    return api


def browser(api: Api) -> TestClient:
    """A client as a browser is: cookies kept, no bearer token, same-origin requests."""
    return TestClient(api.app, base_url="http://testserver", follow_redirects=False,
                      headers={"Origin": "http://testserver"}, raise_server_exceptions=False)


def signed_in(api: Api, name: str) -> TestClient:
    client = browser(api)
    answer = client.post("/signin", data={"username": name, "password": PASSWORDS[name], "next": "/"})
    assert answer.status_code == 303, answer.text
    return client


def csrf_of(page: str) -> str:
    """The session's form secret, as the page's forms carry it."""
    found = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert found, "no csrf token on the page"
    return found.group(1)
