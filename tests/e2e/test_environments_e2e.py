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

from e2e.server import running_server
from trainyard.client import Client

pytestmark = pytest.mark.e2e

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
    tmp_path, wheels: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the default install runs tasks under per-user accounts: it needs yard up as root")
    (tmp_path / "requirements.txt").write_text(local_requirements(wheels, "tinypkg==0.1"))
    (tmp_path / "home").mkdir()
    with running_server(tmp_path / "home", gpus=1) as srv:
        admin = srv.admin()
        for name in ("alice", "bob"):
            admin.create_user(name)
        admin.create_group("vision")
        admin.add_member("vision", "alice")
        admin.add_member("vision", "bob")
        tokens = {name: admin.create_token(user=name).token for name in ("alice", "bob")}
        alice, bob = Client(srv.url, tokens["alice"]), Client(srv.url, tokens["bob"])

        created = srv.yard("env", "create", "tiny", "-r", str(tmp_path / "requirements.txt"), "--group", "vision",
                           token=tokens["alice"])
        assert created.returncode == 0 and "building environment tiny as job" in created.stdout, created.stderr
        env = alice.wait_environment("tiny", timeout=BUILD_SECONDS)
        assert env.state == "READY" and env.path is not None, alice.logs(env.buildJobId or 0).decode()

        shown = srv.yard("env", "show", "tiny", token=tokens["bob"])
        assert shown.returncode == 0 and "visible to group vision" in shown.stdout, shown.stderr
        listed = json.loads(srv.yard("env", "list", "--json", token=tokens["bob"]).stdout)
        assert [(e["name"], e["state"]) for e in listed] == [("tiny", "READY")]

        job = ("name: in-tiny\nenvironment: tiny\ntaskRoles:\n  main:\n    commands:\n"
               "      - python -c 'import tinypkg; print(tinypkg.GREETING)'\n"
               "      - 'echo \"user=$(id -un) python=$(command -v python)\"'\n"
               "      - 'touch \"$VIRTUAL_ENV/written-by-$(id -un)\" && echo wrote || echo refused'\n")
        outs = {}
        for name, client in (("alice", alice), ("bob", bob)):
            ended = client.wait(client.submit(job).id, timeout=scaled(120))
            outs[name] = client.logs(ended.id).decode()
            assert ended.state == "SUCCEEDED", outs[name]
        for out in outs.values():
            assert "hello from tinypkg" in out and f"python={env.path}/bin/python" in out, out
        assert "wrote" in outs["alice"]  # her own environment (the folder her builds write)
        assert "refused" in outs["bob"] and not Path(env.path, "written-by-ty-bob").exists()

        refused = srv.yard("env", "delete", "tiny", token=tokens["bob"])
        assert refused.returncode != 0 and "only they or an admin can delete it" in refused.stderr
        deleted = srv.yard("env", "delete", "tiny", token=tokens["alice"])
        assert deleted.returncode == 0 and "deleted environment tiny" in deleted.stdout, deleted.stderr
        assert not Path(env.path).exists()
        # The environments' root, beside the work dirs' (tidy up; the server may still be removing
        # the deleted environment's folder, moved aside, in the background).
        shutil.rmtree(Path(env.path).parents[1], ignore_errors=True)
