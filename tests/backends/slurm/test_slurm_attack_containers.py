"""Attacks on the Slurm backend's tasks with an image, as a hostile Trainyard user (issue 29,
"attack"): with per-user accounts a task's container runs as its owner's account, but the
image and its reference are the user's own choice, and root (the task runner, its engine)
acts on both. Each test is one finding of the attack, now fixed: C1 (a setuid program in the
image was root in a container that had the task's root-only directory), C2 (an image
reference naming a path on the node)."""

from __future__ import annotations

import re

import pytest
from podman_support import needs_podman

from slurm.cluster import drive, submit
from slurm.conftest import World
from trainyard.backends.base import TaskKey
from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job


@needs_podman
# FINDING C1 (critical), fixed: the container runs with no-new-privileges and no capabilities,
# and only the account's own folders are bound (never the task's root-only directory,
# where root's runner would have written the exit status through the user's link).
def test_a_setuid_root_program_in_a_users_image_gives_no_root_over_the_task_directory(
        suid_image: str, podman_accounts_world: World) -> None:
    world = podman_accounts_world
    victim = world.tmp / "root-only" / "victim"
    victim.parent.mkdir(mode=0o700)
    victim.write_text("intact\n")
    victim.chmod(0o600)
    job_id = submit(world, f"""
name: suid
image: {suid_image}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 256}}
    commands:
      - t="${{TRAINYARD_SECRETS_DIR%.secrets}}"
      - echo "EUID=$(rootsh -p -c 'id -u')"; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status
      - rootsh -p -c "echo planted > $t/planted; ln -s {victim} $t/exit.tmp" || true
      - exit 3
""")
    job = drive(world, job_id, timeout=90)
    task_dir = world.backend.task_dir(TaskKey(job_id, 0, "main", 0))
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()
    assert job.state == "FAILED", log
    assert victim.read_text() == "intact\n", f"root wrote through the user's link: {victim.read_text()!r}\n{log}"
    assert not (task_dir / "planted").exists(), log
    assert "EUID=0" not in log and re.search(r"^NoNewPrivs:\s+1$", log, re.M) and \
        re.search(r"^CapEff:\s+0+$", log, re.M), log


# FINDING C2 (high), fixed: an image reference with a transport prefix names a path on the node.
@pytest.mark.parametrize("reference", ["docker-archive:/etc/shadow", "oci-archive:/root/x.tar", "dir:/root",
                                       "oci:/var/lib/secret:latest", "containers-storage:other-users-image"])
def test_an_image_reference_naming_a_transport_is_refused_at_submit(reference: str) -> None:
    with pytest.raises(SpecError, match="image"):
        parse_job(f"name: x\nimage: {reference}\ntaskRoles: {{main: {{commands: ['true']}}}}\n")
