"""Into a running task's ports through a real ``yard up``: the reverse proxy (HTTP and
WebSocket) and ``yard port-forward``, for the job's owner only.

Alice's job serves a folder with ``python3 -m http.server`` on one declared port and echoes
WebSocket frames on another; Bob, a third user, gets 404 as for a job that does not exist.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from e2e.server import Server, wait_until
from trainyard.client import Client

pytestmark = pytest.mark.e2e

MARKER = f"marker-{uuid.uuid4().hex}.txt"


def job_file(gates: Path) -> str:
    return f"""
name: web
taskRoles:
  main:
    resourcePerInstance: {{gpu: 0, cpu: 0.5, memoryMB: 256, ports: {{http: 1, ws: 1}}}}
    commands:
      - mkdir site && echo hello > site/{MARKER}
      - python3 {gates}/ws_echo.py $PAI_PORT_LIST_main_0_ws &
      - exec python3 -m http.server $PAI_PORT_LIST_main_0_http --bind 0.0.0.0 --directory site
"""


class Web:
    def __init__(self, server: Server, gates: Path) -> None:
        admin = server.admin()
        for name in ("alice", "bob"):
            admin.create_user(name)
        self.alice = admin.create_token(user="alice").token
        self.bob = admin.create_token(user="bob").token
        self.admin_token = server.admin()._http.headers["Authorization"].split()[1]
        shutil.copy(Path(__file__).with_name("ws_echo.py"), gates / "ws_echo.py")
        client = Client(server.url, self.alice)
        self.job = client.submit(job_file(gates)).id
        wait_until(lambda: client.job(self.job).state == "RUNNING", timeout=60, what="the job to run")
        task = client.job(self.job).attempts[-1].tasks[0]
        self.http, self.ws = task.ports["http"][0], task.ports["ws"][0]
        self.base = f"{server.url}/proxy/jobs/{self.job}/main/0"
        wait_until(lambda: self.get(self.alice, f"/{self.http}/").status_code == 200, timeout=30,
                   what="http.server to answer through the proxy")

    def get(self, token: str | None, path: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.base + path, headers=headers, timeout=10)


@pytest.fixture
def web(server: Server, gates: Path) -> Iterator[Web]:
    yield Web(server, gates)


def test_the_owner_reaches_the_tasks_http_server_through_the_proxy_and_nobody_else_does(web: Web,
                                                                                       server: Server) -> None:
    listing = web.get(web.alice, f"/{web.http}/")
    assert listing.status_code == 200 and MARKER in listing.text
    assert web.get(web.alice, f"/{web.http}/{MARKER}").text == "hello\n"
    bare = web.get(web.alice, f"/{web.http}")  # the mount point wants its slash, for relative links
    assert bare.status_code == 307 and bare.headers["location"] == f"/proxy/jobs/{web.job}/main/0/{web.http}/"

    refused = web.get(web.bob, f"/{web.http}/")
    assert refused.status_code == 404 and refused.json()["detail"] == f"no job {web.job}"
    assert web.get(None, f"/{web.http}/").status_code == 401
    assert web.get(web.admin_token, f"/{web.http}/").status_code == 200  # admins, with a token
    undeclared = web.get(web.alice, "/22/")
    assert undeclared.status_code == 404 and "not one of task main/0's ports" in undeclared.json()["detail"]
    no_task = httpx.get(web.base.replace("/main/0", "/main/7") + f"/{web.http}/",
                        headers={"Authorization": f"Bearer {web.alice}"}, timeout=10)
    assert no_task.status_code == 404 and no_task.json()["detail"] == f"job {web.job} has no running task main/7"

    events = Client(server.url, web.alice).job(web.job).events
    opened = [e.message for e in events if e.kind == "port-opened"]
    # Once per user, not once per request.
    assert opened == [f"{who} opened the proxy to task main/0 port {web.http}" for who in ("alice", "admin")]


def test_a_websocket_reaches_the_task_through_the_proxy(web: Web, server: Server) -> None:
    url = f"ws://127.0.0.1:{server.port}/proxy/jobs/{web.job}/main/0/{web.ws}/echo"
    with connect(url, additional_headers={"Authorization": f"Bearer {web.alice}"}, open_timeout=10) as ws:
        ws.send("ping")
        assert ws.recv(timeout=10) == "ping"
        ws.send(b"\x00\x01" * 50_000)
        assert ws.recv(timeout=10) == b"\x00\x01" * 50_000
    with pytest.raises(Exception) as refused:
        connect(url, additional_headers={"Authorization": f"Bearer {web.bob}"}, open_timeout=10)
    assert "404" in str(refused.value)


def test_yard_port_forward_reaches_the_tasks_http_server(web: Web, server: Server) -> None:
    env = {**server.env, "TRAINYARD_TOKEN": web.alice}
    forward = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", "port-forward", str(web.job),
                                f"0:{web.http}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        assert line.startswith("Forwarding 127.0.0.1:") and f"-> job {web.job} main/0:{web.http}" in line, line
        local = int(line.split()[1].split(":")[1])
        for _ in range(3):  # a connection each
            response = httpx.get(f"http://127.0.0.1:{local}/{MARKER}", timeout=10)
            assert response.text == "hello\n"
    finally:
        forward.terminate()
        forward.wait(10)
    events = Client(server.url, web.alice).job(web.job).events
    assert f"alice opened a port-forward to task main/0 port {web.http}" in [e.message for e in events]

    # Bob's is refused before it listens: the job is not his to see.
    bob = subprocess.run([sys.executable, "-m", "trainyard.cli.main", "port-forward", str(web.job), f"0:{web.http}"],
                         env={**server.env, "TRAINYARD_TOKEN": web.bob}, capture_output=True, text=True, timeout=60)
    assert bob.returncode != 0 and f"no job {web.job}" in bob.stderr


@contextmanager
def browser(server: Server, token: str) -> Iterator[httpx.Client]:
    """A client holding a portal session, as a browser that signed in holds it."""
    with httpx.Client(base_url=server.url, timeout=10) as client:
        signed_in = client.post("/signin", data={"token": token, "next": "/"})
        assert signed_in.status_code == 303, signed_in.text
        yield client


def test_a_signed_in_browser_opens_its_own_jobs_ports_from_the_job_page(web: Web, server: Server) -> None:
    path = f"/proxy/jobs/{web.job}/main/0/{web.http}/"
    with browser(server, web.alice) as alice:
        page = alice.get(f"/jobs/{web.job}")
        assert f'href="{path}"' in page.text  # the job page links each of its running task's ports
        assert MARKER in alice.get(path).text
        # A state-changing request needs this server's own page as its origin (http.server
        # answers POST 501: the request reached it).
        assert alice.post(path, content=b"x", headers={"Origin": "https://elsewhere.example"}).status_code == 403
        assert alice.post(path, content=b"x", headers={"Origin": server.url}).status_code == 501
    with browser(server, web.admin_token) as admin:
        # An admin's browser session would run the user's pages with the admin's rights.
        refused = admin.get(path)
        assert refused.status_code == 403 and "yard port-forward" in refused.json()["detail"]
        assert f'href="{path}"' not in admin.get(f"/jobs/{web.job}").text
    with browser(server, web.bob) as bob:
        assert bob.get(path).status_code == 404
