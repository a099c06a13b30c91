"""Through a real ``yard up`` as root (per-user OS accounts and the bubblewrap sandbox, the
default install): ``yard env create`` builds an environment as its owner's job, a job runs in
it, a group member runs in it too but cannot change it, and ``yard env`` shows and deletes it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from api.wheels import local_requirements, tiny_wheel
from deadlines import scaled

from e2e.server import Server
from trainyard.client import Client

# The worker's shared `yard up` (conftest.py): the environment is deleted at the end, and its
# group, vision, is this module's alone.
pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]

BUILD_SECONDS = 300


@pytest.fixture
def wheels() -> Iterator[Path]:
    """A folder of wheels the tasks' accounts can read: not under /tmp (private to each task
    in the sandbox) nor the server's home (hidden from tasks)."""
    folder = Path(tempfile.mkdtemp(prefix="trainyard-wheels-", dir="/var/lib"))
    folder.chmod(0o755)
    tiny_wheel(folder, "tinypkg", 'GREETING = "hello from tinypkg"\n')
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_an_environment_is_built_by_its_owner_used_by_her_group_and_written_by_her_alone(
    server: Server, tmp_path, wheels: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the default install runs tasks under per-user accounts: it needs yard up as root")
    (tmp_path / "requirements.txt").write_text(local_requirements(wheels, "tinypkg==0.1"))
    admin = server.admin()
    tokens = server.add_users("alice", "bob")
    admin.create_group("vision")
    admin.add_member("vision", "alice")
    admin.add_member("vision", "bob")
    alice, bob = Client(server.url, tokens["alice"]), Client(server.url, tokens["bob"])

    created = server.yard("env", "create", "tiny", "-r", str(tmp_path / "requirements.txt"), "--group", "vision",
                       token=tokens["alice"])
    assert created.returncode == 0 and "building environment tiny as job" in created.stdout, created.stderr
    env = alice.wait_environment("tiny", timeout=BUILD_SECONDS)
    assert env.state == "READY" and env.path is not None, alice.logs(env.buildJobId or 0).decode()

    shown = server.yard("env", "show", "tiny", token=tokens["bob"])
    assert shown.returncode == 0 and "visible to group vision" in shown.stdout, shown.stderr
    listed = json.loads(server.yard("env", "list", "--json", token=tokens["bob"]).stdout)
    assert [(e["name"], e["state"]) for e in listed] == [("tiny", "READY")]

    job = ("name: in-tiny\nenvironment: tiny\ntaskRoles:\n  main:\n    commands:\n"
           "      - python -c 'import tinypkg; print(tinypkg.GREETING)'\n"
           "      - 'echo \"user=$(id -un) python=$(command -v python)\"'\n"
           "      - 'touch \"$VIRTUAL_ENV/written-by-$(id -un)\" && echo wrote || echo refused'\n")
    clients = {"alice": alice, "bob": bob}
    submitted = {name: client.submit(job).id for name, client in clients.items()}  # side by side
    outs = {}
    for name, client in clients.items():
        ended = client.wait(submitted[name], timeout=scaled(120))
        outs[name] = client.logs(ended.id).decode()
        assert ended.state == "SUCCEEDED", outs[name]
    for out in outs.values():
        assert "hello from tinypkg" in out and f"python={env.path}/bin/python" in out, out
    assert "wrote" in outs["alice"]  # her own environment (the folder her builds write)
    assert "refused" in outs["bob"] and not Path(env.path, "written-by-ty-bob").exists()

    refused = server.yard("env", "delete", "tiny", token=tokens["bob"])
    assert refused.returncode != 0 and "only they or an admin can delete it" in refused.stderr
    deleted = server.yard("env", "delete", "tiny", token=tokens["alice"])
    assert deleted.returncode == 0 and "deleted environment tiny" in deleted.stdout, deleted.stderr
    assert not Path(env.path).exists()
