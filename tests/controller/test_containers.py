"""Jobs that name an image, through the real controller, store (SQLite and PostgreSQL) and
local backend with Podman: wiring between containers, the image pull in the job's events,
OUT_OF_MEMORY, and a missing image."""

from __future__ import annotations

import pytest
from podman_support import needs_podman

from trainyard.backends.base import TaskKey
from trainyard.backends.containers import ContainerEngine

pytestmark = needs_podman


@pytest.fixture
def world(make_world):
    return make_world(backend_options={"containers": ContainerEngine.find("podman", "runc")})


def test_a_two_task_job_in_containers_is_wired_and_its_events_show_the_image(world, image) -> None:
    job_id = world.submit(f"""
name: pair
image: {image}
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {{cpu: 1, memoryMB: 256}}
    commands:
      - grep -q trainyard-test-image /etc/trainyard-test-image
      - |
        python3 -u -c '
        import os, socket, time
        addr, port, rank = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["RANK"])
        if rank == 0:
            s = socket.create_server((addr, port)); c, _ = s.accept(); c.sendall(b"hello rank 1")
        else:
            for _ in range(300):
                try:
                    c = socket.create_connection((addr, port)); break
                except OSError:
                    time.sleep(0.1)
            print(c.recv(100).decode())
        '
""")
    job = world.drive(job_id, timeout=90)

    logs = [world.backend.read_log(TaskKey(job_id, 0, t.role, t.index, t.run)).data.decode()
            for t in world.tasks(job_id)]
    assert job.state == "SUCCEEDED", logs
    assert "hello rank 1" in logs[1]
    node = world.backend.inventory()[0].name
    pulls = [message for kind, message in world.events(job_id) if kind == "image-pulled"]
    assert sorted(pulls) == [f"task worker/{i}: {image} already on node {node}" for i in (0, 1)]


def test_a_container_over_its_memory_ends_the_job_out_of_memory(world, image) -> None:
    job_id = world.submit(f"""
name: hungry
taskRoles:
  m:
    image: {image}
    resourcePerInstance: {{cpu: 1, memoryMB: 64}}
    commands: ["python3 -c 'x = bytearray(400 * 1024 * 1024)'"]
""")
    job = world.drive(job_id, timeout=90)

    assert job.state == "FAILED"
    [task] = world.tasks(job_id)
    assert task.exit_code == 137
    assert "OUT_OF_MEMORY: used more than its 64 MiB memory limit (memoryMB: 64)" in task.message


def test_a_job_whose_image_cannot_be_pulled_fails_saying_so(world) -> None:
    job_id = world.submit("""
name: missing
prerequisites: [{name: img, type: dockerimage, uri: "localhost/trainyard-no-such-image:1"}]
taskRoles:
  m: {dockerImage: img, commands: [echo never]}
""")
    job = world.drive(job_id, timeout=120)

    assert job.state == "FAILED"
    node = world.backend.inventory()[0].name
    [task] = world.tasks(job_id)
    assert task.exit_code == 125
    assert f"could not pull localhost/trainyard-no-such-image:1 on node {node}" in task.message
    said = dict(world.events(job_id))  # the job's own message says why too
    assert f"task m/0: exited with 125 (could not pull localhost/trainyard-no-such-image:1 on node {node}" in (
        said["failed"])
    assert said["image-pulled"].startswith("task m/0: could not pull")
    assert "could not pull" in said["task-exited"]



def test_a_pull_that_cannot_succeed_fails_the_job_at_once_with_the_engines_reason(world) -> None:
    # Podman's real answer to an invalid name ("repository name must be lowercase"): pulling
    # again cannot help, so neither taskRetryCount nor jobRetryCount is spent on it.
    job_id = world.submit("""
name: invalid
jobRetryCount: 2
image: localhost/Trainyard-Invalid:1
taskRoles:
  m: {taskRetryCount: 1, commands: [echo never]}
""")
    job = world.drive(job_id, timeout=120)

    assert job.state == "FAILED"
    assert [a.state for a in world.attempts(job_id)] == ["FAILED"]
    [task] = world.tasks(job_id)
    assert (task.exit_code, task.run) == (125, 0)
    assert task.message.startswith("IMAGE_UNAVAILABLE: could not pull localhost/Trainyard-Invalid:1 on node ")
    assert "repository name must be lowercase" in task.message
    assert "repository name must be lowercase" in dict(world.events(job_id))["failed"]
