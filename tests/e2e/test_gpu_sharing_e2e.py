"""Safe GPU sharing live, against a real `yard up` (simulated GPUs): fractions of one user
share a GPU, another user's fraction does not join them under the default rule (it goes
elsewhere, or waits saying why), and does once the admin lets anyone share in the VC. (Who
may set the rule, and the answers to a bad one: tests/api/test_api_vc_sharing.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.server import Server, running_server, wait_until
from trainyard.client import Client

pytestmark = pytest.mark.e2e

HALF = """
name: half-{n}
defaults: {{virtualCluster: team}}
taskRoles:
  w:
    resourcePerInstance: {{gpu: 0.5, cpu: 0.1, memoryMB: 64}}
    commands: ['sleep 600']
"""


@pytest.fixture
def two_gpus(database_url: str, tmp_path_factory) -> Iterator[Server]:
    url = None if database_url.startswith("sqlite") else database_url
    with running_server(tmp_path_factory.mktemp("home"), gpus=2, database_url=url) as srv:
        yield srv


def gpu_of(client: Client, job_id: int) -> tuple[str, int]:
    (task,) = client.job(job_id).attempts[-1].tasks
    (index,) = task.gpus
    return task.node, index


def running(client: Client, job_id: int, what: str) -> None:
    wait_until(lambda: client.job(job_id).state == "RUNNING", timeout=60, what=what)


def test_fractions_share_a_gpu_only_with_their_own_user_until_the_vc_allows_anyone(two_gpus: Server) -> None:
    admin = two_gpus.admin()
    for user in ("alice", "bob"):
        admin.create_user(user)
    vc = admin.create_vc("team", gpus=2)
    assert vc.gpuSharing == "same-user"
    admin.grant_vc("team", "alice")
    admin.grant_vc("team", "bob")
    alice = Client(two_gpus.url, admin.create_token(user="alice").token)
    bob = Client(two_gpus.url, admin.create_token(user="bob").token)

    first = alice.submit(HALF.format(n=1)).id
    running(alice, first, "alice's first half GPU to run")
    second = alice.submit(HALF.format(n=2)).id
    running(alice, second, "alice's second half GPU to run")
    assert gpu_of(alice, first) == gpu_of(alice, second)  # her own jobs share one GPU

    bobs = bob.submit(HALF.format(n=3)).id
    running(bob, bobs, "bob's half GPU to run on the other GPU")
    assert gpu_of(bob, bobs) != gpu_of(alice, first)

    third = alice.submit(HALF.format(n=4)).id  # only bob's GPU has room: it waits
    node, index = gpu_of(bob, bobs)
    wanted = f"GPU {index} of node {node} is shared with another user's job; VC team allows sharing with: same-user"
    wait_until(lambda: getattr(alice.job(third).pending, "message", "").startswith(wanted), timeout=60,
               what="alice's third half GPU to wait, saying the sharing rule keeps it out")
    assert alice.job(third).state == "WAITING"

    assert admin.set_vc_sharing("team", "anyone").gpuSharing == "anyone"
    assert {v.name: v.gpuSharing for v in admin.vcs()}["team"] == "anyone"
    running(alice, third, "alice's third half GPU to join bob's once anyone may share")
    assert gpu_of(alice, third) == gpu_of(bob, bobs)

