"""Issue 27, finding 9, on the default root install (``yard up`` as root: per-user task
accounts and the bubblewrap sandbox), each by the route it was found by:

- a submit whose answer never reached its client: the client sends it again and got a second
  job (5 jobs were made that no client saw acknowledged). Now ``POST /jobs`` takes an
  ``Idempotency-Key``, and the SDK retries a lost submit with it: one job;
- the server's log kept every proxied URL with its query string, JupyterLab's ``?token=``
  among them. Now no query of a proxied request reaches the log;
- a lone surrogate in a node label's key answered 500. Now it is a 422 at its path.

One server for the module: each ``yard up`` costs 10-15 s.
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest
from deadlines import scaled

from e2e.server import Server, default_install
from e2e.webjob import WebJob, served
from trainyard.client import Client

pytestmark = pytest.mark.e2e

JOB = "name: {name}\ntaskRoles:\n  m:\n    commands: ['true']\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with default_install(tmp_path_factory, gpus=4) as srv:
        yield srv


@pytest.fixture(scope="module")
def web(server: Server) -> Iterator[WebJob]:
    """Alice's job serving HTTP on a declared port (and Bob, who may not see it)."""
    with served(server) as job:
        yield job


def jobs_named(server: Server, name: str) -> list[int]:
    return [j.id for j in server.admin().jobs(name=name, limit=500).items if j.name == name]


def test_two_submits_with_one_key_make_one_job_and_the_key_with_another_body_is_422(server: Server,
                                                                                     web: WebJob) -> None:
    name, key = f"twice-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    headers = {"Authorization": f"Bearer {web.alice}", "Content-Type": "application/yaml", "Idempotency-Key": key}
    first = httpx.post(f"{server.url}/api/v1/jobs", content=JOB.format(name=name), headers=headers, timeout=scaled(30))
    assert first.status_code == 201, first.text
    again = httpx.post(f"{server.url}/api/v1/jobs", content=JOB.format(name=name), headers=headers, timeout=scaled(30))
    assert again.status_code == 201 and again.json() == first.json(), again.text
    assert jobs_named(server, name) == [first.json()["id"]]

    other = httpx.post(f"{server.url}/api/v1/jobs", content=JOB.format(name=name + "-b"), headers=headers,
                       timeout=scaled(30))
    assert other.status_code == 422, other.text
    assert [e["path"] for e in other.json()["errors"]] == ["Idempotency-Key"]
    assert jobs_named(server, name + "-b") == []


class DropsFirstSubmitAnswer:
    """A TCP relay in front of the server that lets the first ``POST /api/v1/jobs`` through and
    closes its client's connection when the answer starts to come back: the job is made, the
    client never hears of it (a dropped connection, a proxy's timeout)."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        self.submits = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        first = client.recv(65536)
        submit = first.startswith(b"POST /api/v1/jobs ")
        self.submits += submit
        drop = submit and self.dropped == 0
        if drop:
            self.dropped += 1
        upstream.sendall(first)

        def to_upstream() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=to_upstream, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                if drop:
                    break  # the answer began: the server has made the job; the client hears nothing
                client.sendall(data)
        except OSError:
            pass
        for end in (client, upstream):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()

    def close(self) -> None:
        self.listener.close()


def test_the_sdk_sends_a_submit_whose_answer_was_lost_again_and_it_makes_one_job(server: Server,
                                                                                   web: WebJob) -> None:
    relay = DropsFirstSubmitAnswer(server.port)
    name = f"lost-{uuid.uuid4().hex[:8]}"
    try:
        with Client(f"http://127.0.0.1:{relay.port}", web.alice) as alice:
            job = alice.submit(JOB.format(name=name))  # the SDK as any script calls it
    finally:
        relay.close()
    assert relay.dropped == 1 and relay.submits == 2
    assert jobs_named(server, name) == [job.id]


def test_the_query_of_a_proxied_request_never_reaches_the_server_log(server: Server, web: WebJob) -> None:
    secret = f"SECRET{uuid.uuid4().hex}"
    for path in (f"/{web.http}/?token={secret}", f"/{web.http}/{web.marker}?_xsrf={secret}&a=1"):
        answer = web.get(web.alice, path)
        assert answer.status_code == 200, answer.text
    bare = web.get(web.alice, f"/{web.http}?token={secret}")  # the bare prefix: redirected with its query
    assert bare.status_code == 307 and secret in bare.headers["location"]
    log = server.log()
    assert f"serving on {server.url}" in log  # the right log, and written to
    assert secret not in log


def test_a_lone_surrogate_in_a_node_label_key_is_422_at_its_path(server: Server) -> None:
    admin = server.admin()
    node = admin.nodes()[0].name
    token = admin._http.headers["Authorization"]
    for body, path in (('{"labels": {"\\ud800": "x"}}', "labels.\\ud800"),
                       ('{"labels": {"ib": "\\udfff"}}', "labels.ib")):
        answer = httpx.patch(f"{server.url}/api/v1/nodes/{node}/labels", content=body,
                             headers={"Authorization": token, "Content-Type": "application/json"}, timeout=scaled(30))
        assert answer.status_code == 422, answer.text
        assert [e["path"] for e in answer.json()["errors"]] == [path]
    assert admin.nodes()[0].adminLabels == {}
