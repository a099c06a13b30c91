"""Into a Slurm task's ports through a real ``yard up --backend slurm``: the proxy (HTTP and
WebSocket) and ``yard port-forward`` reach the compute node at the address Slurm gives it
(``NodeAddr``; the dev cluster's nodes n1-n4 are names no resolver knows, each at an address
of its own in a network namespace of its own), on the ports the backend allocated and passed
to the task; for a process task and for a task in a Podman container inside the job step.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest
from deadlines import scaled
from e2e.server import Server
from e2e.webjob import served
from podman_support import needs_podman

from slurm.cluster import node_addr, on_node, slurm_yard_up
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.client import Client

pytestmark = pytest.mark.e2e

CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()"


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=scaled(2)):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def slurm_server(slurm: SlurmCommands, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ``yard up --backend slurm`` (SQLite) for both kinds of task (a start costs seconds):
    each test's job is its own, stopped at its end (``served``)."""
    with slurm_yard_up(slurm, tmp_path_factory.mktemp("home")) as srv:
        yield srv


@pytest.mark.parametrize("kind", ["process", pytest.param("container", marks=needs_podman)])
def test_a_slurm_tasks_ports_are_reached_at_its_nodes_address(slurm_server: Server, slurm: SlurmCommands,
                                                              kind: str, request: pytest.FixtureRequest) -> None:
    image = request.getfixturevalue("image") if kind == "container" else None
    with served(slurm_server, image=image, timeout=120) as web:
        node = web.task.node
        assert node in ("n1", "n2", "n3", "n4")  # a Slurm node's name, which does not resolve
        assert web.host == node_addr(slurm, node)  # the server reaches the task where Slurm reaches its node
        if web.host != "127.0.0.1":  # the node is a machine of its own: its ports are not this machine's
            assert not reachable("127.0.0.1", web.http)
            # And it listens on its node's own loopback, which is not this machine's.
            on_node(slurm, node, [sys.executable, "-c", CONNECT, "127.0.0.1", str(web.http)])
        if image is not None:
            assert Client(slurm_server.url, web.alice).logs(web.job).startswith(b"trainyard-test-image bookworm")
        web.check_http()
        web.check_websocket()
        web.check_port_forward(connections=2)
    assert not web.serving()  # stopped with its job: a container too
