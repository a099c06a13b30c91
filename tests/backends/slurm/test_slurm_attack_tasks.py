"""Attacks on the Slurm backend's sandboxed tasks, as a hostile Trainyard user (issue 29,
"attack"): what a task that runs as its owner's account in the sandbox can do to its own
records and to other users' tasks. A strict xfail is a finding that holds today; a plain
test is an attack that fails today, kept as a regression test."""

from __future__ import annotations

import json
import random
import shlex
from collections.abc import Collection

from e2e.server import wait_until

from slurm.cluster import drive, submit
from slurm.conftest import World
from trainyard.backends.base import TaskKey
from trainyard.core.clock import SystemClock
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.rows import JobRow, UserRow

# The ports this test's tasks are given: a few above the backend's range, so that holding
# them all (as an attacker holds the whole range) faults no one else's task on the cluster.
PRIVATE_PORTS = range(33170, 33180)


def _submit_as(world: World, user: str, text: str) -> int:
    with world.db.session() as s:
        owner = s.query(UserRow).filter_by(name=user).one_or_none() or auth.create_user(
            s, user, is_admin=False, clock=SystemClock())
        return job_service.submit_job(s, owner, parse_job(text), clock=SystemClock()).id


def test_a_sandboxed_task_cannot_forge_its_exit_fault_oom_or_metrics(accounts_world) -> None:
    """Regression: the task's records lie in its root-only directory, which the sandbox binds
    read-only and the account cannot enter; a link planted there (exit.tmp) is refused too."""
    world = accounts_world
    job_id = submit(world, """
name: forge
taskRoles:
  main:
    commands:
      - t="${TRAINYARD_SECRETS_DIR%.secrets}"
      - for f in exit fault oom metrics.json exit.tmp fault.tmp relay.stop spec.json; do
          (echo 0 > "$t/$f") 2>/dev/null && echo "WROTE $f";
          ln -s /etc/passwd "$t/$f" 2>/dev/null && echo "LINKED $f"; done
      - ls "$t" > /dev/null 2>&1 && echo LISTED
      - exit 3
""")
    job = drive(world, job_id)
    key = TaskKey(job_id, 0, "main", 0)
    log = world.backend.read_log(key).data.decode()
    assert job.state == "FAILED", log
    assert "WROTE" not in log and "LINKED" not in log and "LISTED" not in log, log
    task_dir = world.backend.task_dir(key)
    assert (task_dir / "exit").read_text() == "3\n" and not (task_dir / "fault").exists()


# FINDING P1 (medium), mitigated: alice's task holds every port of the range on its node (the
# network is the node's); bob's task placed there is a platform fault, and the retry goes to
# another node (the lost attempt's nodes are avoided) instead of back until the retries ran out.
def test_a_users_task_holding_the_port_range_cannot_fail_another_users_jobs(accounts_world) -> None:
    world = accounts_world

    def private_ports(node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        return random.sample([p for p in PRIVATE_PORTS if p not in taken], count)

    world.backend.allocate_ports = private_ports  # type: ignore[method-assign]
    holder = f"""
import socket, time
held = []
for port in range({PRIVATE_PORTS.start}, {PRIVATE_PORTS.stop}):
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(family)
        try:
            s.bind((address, port)); s.listen(); held.append(s)
        except OSError:
            s.close()
print("holding", len(held), flush=True)
time.sleep(600)
"""
    command = json.dumps(f"python3 -c {shlex.quote(holder)}")
    alice = _submit_as(world, "alice", f"name: hold\ntaskRoles:\n  main:\n    commands: [{command}]\n")
    alice_key = TaskKey(alice, 0, "main", 0)

    def holding() -> bool:
        world.controller.wake()
        world.controller.run_once()
        return b"holding" in world.backend.read_log(alice_key).data

    wait_until(holding, timeout=30, interval=0.05, what="alice's task to hold the ports")
    bob = _submit_as(world, "bob", """
name: serve
taskRoles:
  main:
    resourcePerInstance: {cpu: 1, memoryMB: 64, ports: {http: 1}}
    commands: [echo served]
""")
    job = drive(world, bob, timeout=60)
    with world.db.session() as s:
        alice_node = s.get(JobRow, alice).attempts[0].tasks[0].node
        attempts = [(a.state, a.tasks[0].node, a.reason) for a in s.get(JobRow, bob).attempts]
    assert job.state == "SUCCEEDED", attempts
    if attempts[0][1] == alice_node:  # placed beside her (best fit packs): lost there, then elsewhere
        assert attempts[0][0] == "LOST" and attempts[-1][1] != alice_node, attempts
