"""Issue 27, finding 4, on the default install (``yard up`` as root: per-user task accounts,
the bubblewrap sandbox): another user's job that listens on a task's port first does not
get the owner's requests, nor a session's JupyterLab token.

Bob's job (the squatter) listens on whatever port the test names in its folder, and writes
every request it gets there. Alice's task was given that port and does not listen on it
(her job sleeps; her session's JupyterLab has not started yet, and cannot once Bob holds
its port). On the unfixed server the proxy, the WebSocket proxy, the port-forward tunnel,
the session way in and the session idle check all forwarded to Bob's listener, with the
session's ``Authorization: token …``; now each refuses (502, "held by another process")
before a byte goes out, and Bob hears nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from deadlines import scaled
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from e2e.server import Server, running_server, shared_folder, wait_until
from trainyard.client import Client

pytestmark = pytest.mark.e2e

SESSION_PYTHON = os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON") if os.geteuid() == 0 else None

# Bob's listener: for each ``want-PORT`` file in its folder, listen on PORT (every address),
# say so (``listening-PORT``) and append every byte any connection sends to ``heard-PORT``.
SQUATTER = r'''
import os, socket, sys, threading, time
gates = sys.argv[1]

def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(16)
    open(os.path.join(gates, f"listening-{port}"), "w").close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=record, args=(c, port), daemon=True).start()

def record(c, port):
    c.settimeout(10)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        if data:
            with open(os.path.join(gates, f"heard-{port}"), "ab") as f:
                f.write(data)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nbob's page\n")
    except OSError:
        pass
    c.close()

started = set()
while True:
    for name in os.listdir(gates):
        if name.startswith("want-") and name not in started:
            started.add(name)
            threading.Thread(target=serve, args=(int(name[5:]),), daemon=True).start()
    time.sleep(0.05)
'''


@dataclass
class World:
    server: Server
    alice: str
    bob: str
    gates: Path

    def squat(self, port: int) -> None:
        """Bob's job listens on ``port`` (before Alice's task does)."""
        (self.gates / f"want-{port}").touch()
        wait_until(lambda: (self.gates / f"listening-{port}").exists(), timeout=30,
                   what=f"Bob's job to listen on port {port}")

    def heard(self, port: int) -> bytes:
        path = self.gates / f"heard-{port}"
        return path.read_bytes() if path.exists() else b""


def _running_job(client: Client, job_id: int) -> None:
    def running() -> bool:
        job = client.job(job_id)
        assert job.state in ("WAITING", "RUNNING"), (job.state, job.message, client.logs(job_id))
        return job.state == "RUNNING"

    wait_until(running, timeout=60, what=f"job {job_id} to run")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One server for the module (its own SQLite: the finding is the node's, not the
    database's), with Bob's squatter running."""
    if SESSION_PYTHON is None:
        why = "needs the default root install with TRAINYARD_TEST_NONROOT_PYTHON (a Python with JupyterLab)"
        if os.environ.get("TRAINYARD_REQUIRE_NONROOT"):
            pytest.fail(why)
        pytest.skip(why)
    gates = shared_folder("ports-")
    # The idle check reads sessions every second, so that it too meets Bob's listener.
    env = {"TRAINYARD_SESSION_PYTHON": SESSION_PYTHON, "TRAINYARD_SESSION_CHECK_INTERVAL_SECONDS": "1"}
    try:
        with running_server(tmp_path_factory.mktemp("home"), gpus=1, extra_env=env) as server:
            tokens = server.add_users("alice", "bob")
            alice, bob = tokens["alice"], tokens["bob"]
            (gates / "squat.py").write_text(SQUATTER)
            squatter = {"name": "squatter", "taskRoles": {"main": {
                "resourcePerInstance": {"gpu": 0, "cpu": 0.5, "memoryMB": 256},
                "commands": [f"exec python3 {gates}/squat.py {gates}"]}}}
            bobs = Client(server.url, bob)
            _running_job(bobs, bobs.submit(json.dumps(squatter), content_type="application/json").id)
            yield World(server, alice, bob, gates)
    finally:
        shutil.rmtree(gates, ignore_errors=True)


def test_another_users_listener_on_a_tasks_port_gets_no_request_through_the_proxy_websocket_or_tunnel(
        world: World) -> None:
    alices = Client(world.server.url, world.alice)
    spec = {"name": "quiet", "taskRoles": {"main": {
        "resourcePerInstance": {"gpu": 0, "cpu": 0.5, "memoryMB": 256, "ports": {"http": 1}},
        "commands": ["sleep 600"]}}}
    job = alices.submit(json.dumps(spec), content_type="application/json").id
    _running_job(alices, job)
    port = alices.job(job).attempts[-1].tasks[0].ports["http"][0]
    world.squat(port)
    alice = {"Authorization": f"Bearer {world.alice}"}

    answer = httpx.get(f"{world.server.url}/proxy/jobs/{job}/main/0/{port}/private?q=1",
                       headers={**alice, "Cookie": "lab-session=alices"}, timeout=scaled(30))
    assert answer.status_code == 502, (answer.status_code, answer.text)
    assert "held by another process" in answer.json()["detail"], answer.text
    assert "bob's page" not in answer.text

    ws = f"ws://127.0.0.1:{world.server.port}/proxy/jobs/{job}/main/0/{port}/socket"
    with pytest.raises(InvalidStatus) as refused:
        with connect(ws, additional_headers=alice, open_timeout=scaled(30)) as opened:
            opened.send("hello")
    assert refused.value.response.status_code == 502
    assert b"held by another process" in refused.value.response.body

    tunnel = f"ws://127.0.0.1:{world.server.port}/api/v1/jobs/{job}/tasks/main/0/ports/{port}/tunnel"
    with pytest.raises(InvalidStatus) as refused:
        with connect(tunnel, additional_headers=alice, open_timeout=scaled(30)) as opened:
            opened.send(b"GET /through-the-tunnel HTTP/1.1\r\nHost: x\r\n\r\n")
            opened.recv(timeout=scaled(10))
    assert refused.value.response.status_code == 502
    assert b"held by another process" in refused.value.response.body

    assert world.heard(port) == b""  # not one request of Alice's reached Bob's listener
    alices.stop(job)


def test_another_users_listener_on_a_sessions_port_never_gets_its_jupyterlab_token(world: World) -> None:
    alice = {"Authorization": f"Bearer {world.alice}"}
    started = httpx.post(f"{world.server.url}/api/v1/sessions", headers=alice, json={}, timeout=scaled(30))
    assert started.status_code == 201, started.text
    session = started.json()["id"]
    alices = Client(world.server.url, world.alice)

    def session_port() -> int | None:
        job = alices.job(session)
        assert job.state in ("WAITING", "RUNNING"), (job.state, job.message)
        tasks = job.attempts[-1].tasks if job.attempts else []
        return tasks[0].ports["lab"][0] if job.state == "RUNNING" and tasks and tasks[0].ports else None

    port = wait_until(session_port, timeout=60, what=f"session {session} to run")
    world.squat(port)  # before its JupyterLab (which then cannot listen there)

    answer = httpx.get(f"{world.server.url}/sessions/{session}/api/contents", headers=alice, timeout=scaled(30))
    assert answer.status_code == 502, (answer.status_code, answer.text)
    assert "held by another process" in answer.json()["detail"], answer.text

    # The controller's idle check met the same listener, and did not send the token either.
    def checked() -> bool:
        view = httpx.get(f"{world.server.url}/api/v1/sessions/{session}", headers=alice, timeout=scaled(30)).json()
        return "held by another process" in str(view.get("checkError"))

    wait_until(checked, timeout=30, what="the idle check to meet Bob's listener and say so")
    heard = world.heard(port)
    assert b"token" not in heard.lower() and heard == b"", heard
