"""A running job that serves its two declared ports, for the proxy's tests on every backend:
``python3 -m http.server`` on ``http`` (a folder holding a marker file) and the standard
library's WebSocket echo (``ws_echo.py``) on ``ws``; with ``image``, in a container of it.

The echo server's source goes into the task's working directory through the job's own
commands, so that the job needs no folder shared with the test: a container sees only its
work and job directories, and a Slurm node only what its job step binds.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from deadlines import scaled
from websockets.sync.client import connect

from e2e.server import Server, wait_until
from trainyard.client import Client

ECHO_SOURCE = Path(__file__).with_name("ws_echo.py").read_text()


def job_text(marker: str, image: str | None = None, name: str = "web") -> str:
    spec: dict[str, object] = {
        "name": name,
        "taskRoles": {"main": {
            "resourcePerInstance": {"gpu": 0, "cpu": 0.5, "memoryMB": 256, "ports": {"http": 1, "ws": 1}},
            "commands": [
                f"mkdir site && echo hello > site/{marker}",
                f"cat > ws_echo.py <<'ECHO'\n{ECHO_SOURCE}ECHO",
                "python3 ws_echo.py $PAI_PORT_LIST_main_0_ws &",
                "exec python3 -m http.server $PAI_PORT_LIST_main_0_http --bind 0.0.0.0 --directory site",
            ],
        }},
    }
    if image is not None:
        spec["image"] = image
        spec["taskRoles"]["main"]["commands"].insert(0, "cat /etc/trainyard-test-image")  # type: ignore[index]
    return json.dumps(spec)


class WebJob:
    """Alice's running job (and Bob, a user who may not see it), served through ``server``."""

    def __init__(self, server: Server, image: str | None = None, timeout: float = 60) -> None:
        self.server = server
        tokens = server.add_users("alice", "bob")
        self.alice, self.bob = tokens["alice"], tokens["bob"]
        self.admin_token = server.admin()._http.headers["Authorization"].split()[1]
        self.marker = f"marker-{uuid.uuid4().hex}.txt"
        client = Client(server.url, self.alice)
        self.job = client.submit(job_text(self.marker, image), content_type="application/json").id

        def running() -> bool:
            job = client.job(self.job)
            assert job.state in ("WAITING", "RUNNING"), (job.state, job.message, client.logs(self.job))
            return job.state == "RUNNING"

        wait_until(running, timeout=timeout, what=f"job {self.job} to run")
        self.task = client.job(self.job).attempts[-1].tasks[0]
        self.http, self.ws = self.task.ports["http"][0], self.task.ports["ws"][0]
        # Where the task's ports are, as the server reaches them: its node's address (a Slurm
        # dev cluster's nodes have their own, in network namespaces of their own).
        self.host = next(n.address for n in server.admin().nodes() if n.name == self.task.node)
        self.base = f"{server.url}/proxy/jobs/{self.job}/main/0"
        self.path = f"/proxy/jobs/{self.job}/main/0/{self.http}/"
        wait_until(lambda: self.get(self.alice, f"/{self.http}/").status_code == 200
                   and self.echoes(), timeout=timeout, what="the task's servers to answer through the proxy")

    def get(self, token: str | None, path: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.base + path, headers=headers, timeout=scaled(10))

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.server.port}/proxy/jobs/{self.job}/main/0/{self.ws}/echo"

    def echoes(self) -> bool:
        """Whether the echo server answers yet (it starts beside http.server)."""
        try:
            with connect(self.ws_url, additional_headers={"Authorization": f"Bearer {self.alice}"},
                         open_timeout=scaled(10)) as ws:
                ws.send("up?")
                return ws.recv(timeout=scaled(10)) == "up?"
        except Exception:  # noqa: BLE001 - a 502 while the echo server starts
            return False

    def check_http(self) -> None:
        """The owner reads the task's page and file; Bob and the signed-out do not."""
        listing = self.get(self.alice, f"/{self.http}/")
        assert listing.status_code == 200 and self.marker in listing.text
        assert self.get(self.alice, f"/{self.http}/{self.marker}").text == "hello\n"
        refused = self.get(self.bob, f"/{self.http}/")
        assert refused.status_code == 404 and refused.json()["detail"] == f"no job {self.job}"
        assert self.get(None, f"/{self.http}/").status_code == 401

    def check_websocket(self) -> None:
        with connect(self.ws_url, additional_headers={"Authorization": f"Bearer {self.alice}"},
                     open_timeout=scaled(10)) as ws:
            ws.send("ping")
            assert ws.recv(timeout=scaled(10)) == "ping"
            ws.send(b"\x00\x01" * 50_000)
            assert ws.recv(timeout=scaled(10)) == b"\x00\x01" * 50_000
        try:
            connect(self.ws_url, additional_headers={"Authorization": f"Bearer {self.bob}"}, open_timeout=scaled(10))
        except Exception as refused:  # noqa: BLE001 - websockets' InvalidStatus
            assert "404" in str(refused)
        else:
            raise AssertionError("Bob's WebSocket was accepted")

    def check_port_forward(self, connections: int = 3) -> None:
        """``yard port-forward`` as Alice: each local connection reaches http.server."""
        env = {**self.server.env, "TRAINYARD_TOKEN": self.alice}
        forward = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", "port-forward", str(self.job),
                                    f"0:{self.http}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        try:
            assert forward.stdout is not None
            line = forward.stdout.readline()
            assert line.startswith("Forwarding 127.0.0.1:") and f"-> job {self.job} main/0:{self.http}" in line, line
            local = int(line.split()[1].split(":")[1])
            for _ in range(connections):  # a connection each
                response = httpx.get(f"http://127.0.0.1:{local}/{self.marker}", timeout=scaled(10))
                assert response.text == "hello\n"
        finally:
            forward.terminate()
            forward.wait(scaled(10))
        events = Client(self.server.url, self.alice).job(self.job).events
        assert f"alice opened a port-forward to task main/0 port {self.http}" in [e.message for e in events]

    def serving(self) -> bool:
        """Whether anything still listens on the task's http port, at its node's address."""
        try:
            with socket.create_connection((self.host, self.http), timeout=scaled(2)):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the job through Trainyard, and see its server end: a container outlives its
        engine client, which is all that the test server's teardown kills."""
        client = Client(self.server.url, self.alice)
        client.stop(self.job)
        assert client.wait(self.job, timeout=scaled(90)).state == "STOPPED"
        wait_until(lambda: not self.serving(), timeout=30, what="the stopped task's http.server to end")


@contextmanager
def served(server: Server, image: str | None = None, timeout: float = 60) -> Iterator[WebJob]:
    """A :class:`WebJob` for the ``with`` block, stopped at its end."""
    web = WebJob(server, image=image, timeout=timeout)
    try:
        yield web
    finally:
        web.stop()

