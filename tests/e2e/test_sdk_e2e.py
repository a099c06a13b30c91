"""The SDK and `yard` as a CI script uses them, through a real ``yard up``: `yard wait`
riding out a server restart, a clone running with the original's secret, and the SDK
example of docs/user/sdk.md working as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server
from trainyard.cli.exits import EXIT_UNREACHABLE

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

REPO = Path(__file__).resolve().parents[2]
SECRET_JOB = """
name: with-secret
secrets: {token: s3cr3t-value}
taskRoles:
  main:
    resourcePerInstance: {gpu: 0, cpu: 0.5, memoryMB: 128}
    commands: ['echo "token=<% $secrets.token %>"']
"""


def yard_process(server: Server, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainyard.cli.main", *args],
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.own_server  # it stops the server
def test_yard_wait_rides_out_a_server_restart_and_gives_up_after_retry_for(server: Server) -> None:
    job = server.admin().submit(SECRET_JOB)
    server.stop()
    waiter = yard_process(server, "wait", str(job.id), "--retry-for", "90")
    first = waiter.stderr.readline() if waiter.stderr else ""  # written once it has failed to connect
    assert first.startswith(f"yard: cannot reach the Trainyard server at {server.url}") and "asking again" in first
    server.start()  # the same home and port
    out, err = waiter.communicate(timeout=scaled(90))
    assert waiter.returncode == 0 and out.startswith(f"job {job.id}: SUCCEEDED"), err

    server.stop()
    gave_up = server.yard("wait", str(job.id), "--retry-for", "1")
    assert gave_up.returncode == EXIT_UNREACHABLE and "asking again" in gave_up.stderr
    assert gave_up.stderr.splitlines()[-1].startswith("yard: cannot reach the Trainyard server")
    at_once = server.yard("wait", str(job.id), "--retry-for", "0")
    assert at_once.returncode == EXIT_UNREACHABLE and "asking again" not in at_once.stderr


def test_a_clone_runs_with_the_secret_the_server_never_showed(server: Server) -> None:
    with server.admin() as sdk:
        original = sdk.submit(SECRET_JOB)
        assert sdk.wait(original.id, timeout=scaled(60)).state == "SUCCEEDED"
        assert "s3cr3t-value" not in str(sdk.job(original.id).spec)
        clone = server.yard("clone", str(original.id), "--name", "again")
        assert clone.returncode == 0, clone.stderr
        clone_id = int(clone.stdout.split()[2])
        assert sdk.wait(clone_id, timeout=scaled(60)).state == "SUCCEEDED"
        assert sdk.logs(clone_id) == b"token=s3cr3t-value\n"


def sdk_page_example() -> str:
    page = (REPO / "docs" / "user" / "sdk.md").read_text()
    found = re.search(r"```python\n(.*?)```", page, re.S)
    assert found, "docs/user/sdk.md has a python example"
    return found.group(1)


def test_the_sdk_pages_example_runs_as_written(server: Server) -> None:
    """In the repository (its examples/), as the user `yard up` configured: `Client()` with
    no arguments finds the server and token in $TRAINYARD_HOME/client.json."""
    before = {j.id for j in server.admin().jobs().items}  # a shared server's earlier jobs
    ran = subprocess.run(
        [sys.executable, "-c", sdk_page_example()],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=scaled(90),
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("SUCCEEDED ") and "Hello from Trainyard job" in ran.stdout
    made = [j.name for j in server.admin().jobs().items if j.id not in before]
    assert made == ["hello-again", "hello-world", "hello-world"]
