"""Into a running task's ports through a real ``yard up``: the reverse proxy (HTTP and
WebSocket) and ``yard port-forward``, for the job's owner only, for a process task and for a
task in a Podman container (the host's network: the same allocated port either way).

Alice's job serves a folder with ``python3 -m http.server`` on one declared port and echoes
WebSocket frames on another (tests/e2e/webjob.py); Bob, a third user, gets 404 as for a job
that does not exist. The Slurm backend's test is tests/backends/slurm/test_slurm_proxy.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from deadlines import scaled
from podman_support import needs_podman

from e2e.server import Server, wait_until
from e2e.webjob import WebJob, served
from trainyard.client import Client
from trainyard.services.task_access import GRANT_SECONDS

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)


@pytest.fixture
def web(server: Server) -> Iterator[WebJob]:
    with served(server) as job:
        yield job


def test_the_owner_reaches_the_tasks_http_server_through_the_proxy_and_nobody_else_does(web: WebJob,
                                                                                       server: Server) -> None:
    web.check_http()
    bare = web.get(web.alice, f"/{web.http}")  # the mount point wants its slash, for relative links
    assert bare.status_code == 307 and bare.headers["location"] == f"/proxy/jobs/{web.job}/main/0/{web.http}/"
    assert web.get(web.admin_token, f"/{web.http}/").status_code == 200  # admins, with a token
    undeclared = web.get(web.alice, "/22/")
    assert undeclared.status_code == 404 and "not one of task main/0's ports" in undeclared.json()["detail"]
    no_task = httpx.get(web.base.replace("/main/0", "/main/7") + f"/{web.http}/",
                        headers={"Authorization": f"Bearer {web.alice}"}, timeout=scaled(10))
    assert no_task.status_code == 404 and no_task.json()["detail"] == f"job {web.job} has no running task main/7"

    events = Client(server.url, web.alice).job(web.job).events
    opened = [e.message for e in events if e.kind == "port-opened" and e.message.endswith(f"port {web.http}")]
    # Once per user, not once per request.
    assert opened == [f"{who} opened the proxy to task main/0 port {web.http}" for who in ("alice", "admin")]


def test_a_websocket_reaches_the_task_through_the_proxy(web: WebJob) -> None:
    web.check_websocket()


def test_yard_port_forward_reaches_the_tasks_http_server(web: WebJob, server: Server) -> None:
    web.check_port_forward()
    # Bob's is refused before it listens: the job is not his to see.
    bob = subprocess.run([sys.executable, "-m", "trainyard.cli.main", "port-forward", str(web.job), f"0:{web.http}"],
                         env={**server.env, "TRAINYARD_TOKEN": web.bob}, capture_output=True, text=True,
                         timeout=scaled(60))
    assert bob.returncode != 0 and f"no job {web.job}" in bob.stderr


def test_a_revoked_token_stops_reaching_the_task_within_the_proxys_few_seconds(web: WebJob, server: Server) -> None:
    # The proxy keeps a check that let a request through for GRANT_SECONDS (a page's hundred
    # requests ask the store once), so a revocation takes up to that long; not longer, which
    # tests/api/test_proxy_grants.py proves on a clock of its own (here, load could stretch it).
    admin = server.admin()
    token = admin.create_token(user="alice", name="short-lived").token
    assert web.get(token, f"/{web.http}/").status_code == 200
    (view,) = [t for t in admin.tokens(user="alice") if t.name == "short-lived"]
    admin.revoke_token(view.id)
    wait_until(lambda: web.get(token, f"/{web.http}/").status_code == 401, timeout=GRANT_SECONDS + 10,
               what="the revoked token to be refused")
    assert web.get(web.alice, f"/{web.http}/").status_code == 200  # her other token is hers still


@needs_podman
def test_a_container_tasks_ports_are_reached_through_the_proxy_and_yard_port_forward(server: Server,
                                                                                    image: str) -> None:
    # Its container shares the node's network (containers.run_options: --network host), so
    # the task's allocated port is the node's, where the proxy looks for it.
    with served(server, image=image, timeout=120) as web:
        assert Client(server.url, web.alice).logs(web.job).startswith(b"trainyard-test-image bookworm")
        web.check_http()
        web.check_websocket()
        web.check_port_forward()
    assert not web.serving()  # stopped with its job: the container is gone


@contextmanager
def browser(server: Server, token: str) -> Iterator[httpx.Client]:
    """A client holding a portal session, as a browser that signed in holds it."""
    with httpx.Client(base_url=server.url, timeout=scaled(10)) as client:
        signed_in = client.post("/signin", data={"token": token, "next": "/"})
        assert signed_in.status_code == 303, signed_in.text
        yield client


def test_a_signed_in_browser_opens_its_own_jobs_ports_from_the_job_page(web: WebJob, server: Server) -> None:
    path = f"/proxy/jobs/{web.job}/main/0/{web.http}/"
    with browser(server, web.alice) as alice:
        page = alice.get(f"/jobs/{web.job}")
        assert f'href="{path}"' in page.text  # the job page links each of its running task's ports
        assert web.marker in alice.get(path).text
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
