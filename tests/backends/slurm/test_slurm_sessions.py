"""A JupyterLab session on a real ``yard up --backend slurm``: JupyterLab runs in a Slurm job
on a compute node, and the server's proxy reaches it at the address Slurm gives the node
(``NodeAddr``), kernel WebSocket included; its owner alone gets in."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import httpx
import pytest
from deadlines import scaled
from e2e.jupyter import bearer, run_code
from e2e.server import Server, wait_until

from slurm.cluster import slurm_yard_up
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.client import Client

pytestmark = pytest.mark.e2e

# Slurm runs tasks as the account running yard up; CI's non-root Python has JupyterLab.
SESSION_PYTHON = os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON") or sys.executable


@pytest.fixture
def slurm_server(slurm: SlurmCommands, database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    settings = {"TRAINYARD_SESSION_PYTHON": SESSION_PYTHON}
    with slurm_yard_up(slurm, tmp_path_factory.mktemp("home"), database_url, extra_env=settings) as srv:
        yield srv


def test_a_session_on_a_slurm_node_is_opened_through_the_server(slurm_server: Server, slurm: SlurmCommands) -> None:
    admin = slurm_server.admin()
    admin.create_user("alice")
    admin.create_user("bob")
    alice_token, bob_token = (admin.create_token(user=name).token for name in ("alice", "bob"))
    alice = Client(slurm_server.url, alice_token)
    session = alice.start_session(cpu=1, memoryMB=1024).id
    wait_until(lambda: alice.session(session).state == "RUNNING", timeout=120, what="the session's Slurm job to run")
    url = f"{slurm_server.url}/sessions/{session}/"
    wait_until(lambda: httpx.get(url + "api/status", headers=bearer(alice_token),
                                 timeout=scaled(10)).status_code == 200,
               timeout=120, what=f"JupyterLab to answer on its node ({alice.job(session).message})")
    task = alice.job(session).attempts[-1].tasks[0]
    assert task.node in ("n1", "n2", "n3", "n4")  # a name no resolver knows: reached at its NodeAddr
    assert run_code(slurm_server, alice_token, session, 'import os; os.environ["SLURM_JOB_ID"] != ""') == "True"
    assert httpx.get(url + "api/kernelspecs", headers=bearer(bob_token), timeout=scaled(10)).status_code == 404
    alice.stop_session(session)
    wait_until(lambda: alice.job(session).state == "STOPPED", timeout=60, what="the session to stop")
