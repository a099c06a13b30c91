"""On the Slurm dev cluster, a task with an image runs in a Podman container started by the
task runner inside its job step (the dev cluster has no GPUs with CDI specs: CPU tasks)."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from api.wheels import node_venv, tiny_wheel
from deadlines import scaled
from e2e.server import wait_until
from podman_support import needs_podman
from sqlalchemy import select

from slurm.cluster import drive, only_task, submit
from slurm.conftest import World, make_world
from trainyard.backends.base import Mount, TaskKey, TaskLaunch
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.slurm import submission
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.core.clock import SystemClock
from trainyard.services import jobs as job_service
from trainyard.store.events import job_events
from trainyard.store.rows import EnvironmentRow, TaskRow

pytestmark = needs_podman


# A task that runs until its test releases it (``release``). Left to the teardown's cancel, a
# container's task often outlived Slurm's SIGTERM (its pid 1 ignores it, or the engine's proxy
# of the SIGCONT before it was killed with the rest of the step), and the teardown waited for
# slurmd's SIGKILL: 7 s.
HOLD = 'while [ ! -e "$TRAINYARD_JOB_DIR/release" ]; do sleep 0.1; done'


def release(world: World, job_id: int) -> None:
    """End a ``HOLD`` task, and its job, as it was asked to."""
    (world.backend.job_dir(job_id) / "release").touch()
    assert drive(world, job_id).state == "SUCCEEDED"


@pytest.fixture
def podman_world(slurm: SlurmCommands, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    yield from make_world(slurm, tmp_path, _sqlite_template, containers=ContainerEngine.find("podman", "runc"))


def test_a_task_with_an_image_runs_in_its_container_inside_the_slurm_step(podman_world, image) -> None:
    world = podman_world
    job_id = submit(world, f"""
name: boxed
image: {image}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 256}}
    commands:
      - cat /etc/trainyard-test-image
      - echo "node=$SLURMD_NODENAME rank=$RANK job_dir=$TRAINYARD_JOB_DIR"
      - echo kept > "$TRAINYARD_JOB_DIR/kept.txt"
      - python3 -c 'import sys; print("python", sys.version_info[:2])'
""")
    job = drive(world, job_id, timeout=90)

    task = only_task(world, job_id)
    with world.db.session() as s:
        pulls = [e.message for e in job_events(s, job_id) if e.kind == "image-pulled"]
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()
    assert job.state == "SUCCEEDED", log
    assert "trainyard-test-image bookworm" in log and "python (3, 11)" in log
    job_dir = world.backend.job_dir(job_id)
    assert f"node={task.node} rank=0 job_dir={job_dir}" in log
    assert (job_dir / "kept.txt").read_text() == "kept\n"
    assert pulls == [f"task main/0: {image} already on node {task.node}"]


def test_with_accounts_a_container_runs_as_its_owner_s_account_and_sees_only_its_own_folders(
        podman_accounts_world, image) -> None:
    """Root's engine, ``--user`` the account's (as on the local backend): its secret is a file
    it reads, its job directory its own; the state directory's runners and the task's
    root-only directory are not there; ``yard exec`` in it runs as the account too."""
    world = podman_accounts_world
    state = world.backend.state_dir
    job_id = submit(world, f"""
name: boxed
image: {image}
secrets: {{token: s3cret}}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 256}}
    commands:
      - echo "$(id -un 2>/dev/null || id -u) pwd=$PWD"
      - cat "$TRAINYARD_SECRETS_DIR/token"; echo
      - echo kept > "$TRAINYARD_JOB_DIR/kept.txt"
      - "ls {state}/bin {state}/jobs/*/0/main-0-0 2>&1 | sed 's/.*: //'"
      - echo started
      - {HOLD}
""")
    key = TaskKey(job_id, 0, "main", 0)
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: "started" in world.backend.read_log(key).data.decode(), timeout=60, what="the task to start")
    uid = pwd.getpwnam("ty-alice").pw_uid
    task_dir = world.backend.task_dir(key)
    with world.db.session() as s:
        node = s.scalars(select(TaskRow).where(TaskRow.job_id == job_id)).one().node
    plan = world.backend.exec_plan(key, node, ["id", "-u"], tty=False)
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=scaled(60),
                          stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout) == (0, f"{uid}\n"), done.stderr
    log = world.backend.read_log(key).data.decode().splitlines()
    assert log[:5] == [f"{uid} pwd={task_dir.with_name('main-0-0.work')}", "s3cret",
                       "No such file or directory", "No such file or directory", "started"], log
    kept = world.backend.job_dir(job_id) / "kept.txt"
    assert (kept.read_text(), kept.stat().st_uid) == ("kept\n", uid)
    release(world, job_id)


MEMORY_JOB = """
name: {name}
image: {image}
jobRetryCount: 0
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 128}}
    commands:
      - python3 -c "b = bytearray({mb} << 20); print('allocated {mb} MiB')"
"""


def container_cgroups(task_dir: Path) -> list[Path]:
    """The container's parent cgroup in every hierarchy, where it still exists."""
    name = json.loads((task_dir / "container.cgroup").read_text())["name"]
    return [path for path in Path("/sys/fs/cgroup").glob(f"*/trainyard/containers/{name}") if path.exists()]


def test_a_container_over_its_memory_ends_out_of_memory_and_its_cgroup_goes(podman_world, image) -> None:
    world = podman_world
    job_id = submit(world, MEMORY_JOB.format(name="hog", image=image, mb=400))
    job = drive(world, job_id, timeout=90)

    message = "OUT_OF_MEMORY: used more than its 128 MiB memory limit (memoryMB: 128) and was killed (exit 137)"
    key = TaskKey(job_id, 0, "main", 0)
    log = world.backend.read_log(key).data.decode()
    assert (job.state, job.exit_code) == ("FAILED", 137), log
    assert job.state_message == f"1 task(s) of role main failed (minFailedInstances=1); task main/0 {message}"
    task = only_task(world, job_id)
    assert (task.state, task.message) == ("FAILED", message)
    status = world.backend.observe([key])[key]
    assert status.reason == "OUT_OF_MEMORY"
    assert "killed by the kernel at its memory limit of 128 MB" in status.message
    assert "\nallocated 400 MiB" not in log
    assert container_cgroups(world.backend.task_dir(key)) == []


def test_a_container_within_its_memory_runs_in_its_cgroup_untouched(podman_world, image) -> None:
    world = podman_world
    job_id = submit(world, MEMORY_JOB.format(name="fits", image=image, mb=16))
    job = drive(world, job_id, timeout=90)

    key = TaskKey(job_id, 0, "main", 0)
    log = world.backend.read_log(key).data.decode()
    assert (job.state, job.exit_code) == ("SUCCEEDED", 0), log
    assert log.endswith("allocated 16 MiB\n")
    task_dir = world.backend.task_dir(key)
    # It ran in the cgroup of Trainyard's (not under the engine's own --memory), now gone.
    assert json.loads((task_dir / "container.json").read_text()) == {"oom_kills": 0, "memory_bytes": 128 << 20}
    assert container_cgroups(task_dir) == []


def test_a_stop_reaches_the_task_in_a_container_in_its_cgroup(podman_world, image) -> None:
    """The cgroup's keeper sits between the runner and the engine's client: it outlives
    the stop's SIGTERM, which the client proxies into the container."""
    world = podman_world
    job_id = submit(world, f"""
name: stoppable
image: {image}
stopGracePeriodSeconds: 20
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 128}}
    commands:
      - trap 'echo got SIGTERM; exit 0' TERM
      - echo started
      - while :; do sleep 0.2; done
""")
    key = TaskKey(job_id, 0, "main", 0)
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: "started" in world.backend.read_log(key).data.decode(), timeout=30, what="the task to start")
    task_dir = world.backend.task_dir(key)
    assert len(container_cgroups(task_dir)) > 1  # memory, and every other hierarchy the engine uses

    with world.db.session() as s:
        job_service.request_stop(s, s.merge(world.user), job_id, clock=SystemClock())
    job = drive(world, job_id, timeout=60)

    assert job.state == "STOPPED"
    assert "got SIGTERM" in world.backend.read_log(key).data.decode()
    assert container_cgroups(task_dir) == []


def test_a_missing_image_fails_the_slurm_task_saying_so(podman_world) -> None:
    world = podman_world
    job_id = submit(world, """
name: nothing
image: localhost/trainyard-no-such-image:1
taskRoles:
  main: {commands: [echo never]}
""")
    job = drive(world, job_id, timeout=120)

    task = only_task(world, job_id)
    assert job.state == "FAILED"
    assert task.exit_code == 125
    assert f"could not pull localhost/trainyard-no-such-image:1 on node {task.node}" in task.message
    assert not task.message.startswith("IMAGE_UNAVAILABLE")  # connection refused: a later try may pass


def test_an_invalid_image_name_fails_the_slurm_job_without_a_retry(podman_world) -> None:
    world = podman_world
    job_id = submit(world, """
name: invalid
jobRetryCount: 1
image: localhost/Trainyard-Invalid:1
taskRoles:
  main: {commands: [echo never]}
""")
    job = drive(world, job_id, timeout=120)

    task = only_task(world, job_id)
    assert (job.state, task.exit_code, job.retries_used) == ("FAILED", 125, 0)
    assert task.message == (f"IMAGE_UNAVAILABLE: could not pull localhost/Trainyard-Invalid:1 on node {task.node}: "
                            "repository name must be lowercase (not retried: pulling again would fail the same way)")


def test_with_pyxis_the_step_runs_in_the_image_through_srun_options(tmp_path) -> None:
    """The dev cluster has no Pyxis: this checks the options the gang runner hands srun."""
    task_dir, job_dir = tmp_path / "state" / "jobs" / "7" / "0" / "main-0-0", tmp_path / "state" / "jobs" / "7" / "job"
    task_dir.mkdir(parents=True)
    launch = TaskLaunch(TaskKey(7, 0, "main", 0), "n1", "true\n", {}, image="registry.example.com/torch:2",
                        mounts=(Mount("/datasets/imagenet", "/data", read_only=True, name="imagenet"),))

    submission.write_task_files(task_dir, launch, {}, job_dir, None, pyxis_root=tmp_path / "state")

    options = (task_dir / "container.pyxis").read_bytes().split(b"\0")[:-1]
    assert [o.decode() for o in options] == [
        "--container-image=registry.example.com#torch:2",  # enroot's [REGISTRY#]IMAGE[:TAG]
        f"--container-mounts={tmp_path / 'state'}:{tmp_path / 'state'},/datasets/imagenet:/data:ro",
        f"--container-workdir={task_dir / 'work'}",
        "--no-container-mount-home",
    ]
    assert not (task_dir / "container.argv").exists()  # no engine inside the step
    # A Docker Hub image, qualified as Docker reads it, is enroot's default registry's.
    assert submission.pyxis_image("docker.io/library/ubuntu:22.04") == "library/ubuntu:22.04"
    assert submission.pyxis_image("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io#nvidia/pytorch:24.01-py3"


def test_a_container_task_with_memory_gets_its_cgroup_and_the_engines_limit_to_fall_back_on(tmp_path) -> None:
    task_dir, job_dir = tmp_path / "state" / "jobs" / "7" / "0" / "main-0-0", tmp_path / "state" / "jobs" / "7" / "job"
    task_dir.mkdir(parents=True)
    launch = TaskLaunch(TaskKey(7, 0, "main", 0), "n1", "true\n", {}, image="localhost/x:1", memory_mb=300)
    engine = ContainerEngine("podman", "/usr/bin/podman", "runc")

    submission.write_task_files(task_dir, launch, {}, job_dir, tmp_path / "py", engine)

    def options(name: str) -> list[str]:
        return (task_dir / name).read_bytes().decode().split("\0")[:-1]

    wanted = json.loads((task_dir / "container.cgroup").read_text())
    assert wanted == {"name": wanted["name"], "memory_mb": 300} and wanted["name"].startswith("trainyard-7-0-main-0-0-")
    assert options("container.parent") == ["--cgroup-parent", f"/trainyard/containers/{wanted['name']}"]
    assert options("container.memory") == ["--memory", "300m", "--memory-swap", "300m"]
    assert not {"--memory", "--cgroup-parent"} & set(options("container.argv"))  # the runner adds one of them


def _ready_environment(world: World, name: str, python: str, *packages: str) -> Path:
    """An environment as its build job would leave it (READY), made directly on the shared state dir."""
    if packages:
        tiny_wheel(world.tmp / "wheels", "tinypkg", 'GREETING = "hello from tinypkg"\n')
    prefix = node_venv(world.backend.environments_root / "alice" / name, python, world.tmp / "wheels", *packages)
    with world.db.session() as s:
        now = SystemClock().now()
        s.add(EnvironmentRow(name=name, owner_id=s.merge(world.user).id, kind="custom", visibility="private",
                             path=str(prefix), requirements="tinypkg", state="READY", message="", created_at=now,
                             finished_at=now))
    return prefix


def test_a_slurm_task_in_an_image_runs_in_its_environment_bound_read_only(podman_world, image) -> None:
    world = podman_world
    prefix = _ready_environment(world, "tiny", "/usr/bin/python3", "tinypkg")  # bookworm's, as in the image
    ok = submit(world, f"""
name: boxed-env
image: {image}
environment: tiny
taskRoles:
  main:
    commands:
      - cat /etc/trainyard-test-image
      - python -c 'import tinypkg; print(tinypkg.GREETING)'
      - 'echo "python=$(command -v python) venv=$VIRTUAL_ENV"'
""")
    job = drive(world, ok, timeout=90)

    log = world.backend.read_log(TaskKey(ok, 0, "main", 0)).data.decode()
    assert job.state == "SUCCEEDED", log
    assert "trainyard-test-image bookworm" in log and "hello from tinypkg" in log
    assert f"python={prefix}/bin/python venv={prefix}" in log


def test_a_slurm_task_whose_environment_the_image_cannot_run_fails_saying_so(podman_world, image) -> None:
    world = podman_world
    prefix = _ready_environment(world, "hostonly", sys.executable)  # pyenv's python: only on this host
    job_id = submit(world, f"""
name: boxed-hostonly
image: {image}
environment: hostonly
taskRoles:
  main: {{commands: [echo never]}}
""")
    job = drive(world, job_id, timeout=90)

    task = only_task(world, job_id)
    assert job.state == "FAILED"
    assert task.exit_code == 125
    assert f"the job's Python environment {prefix} cannot run in image {image}" in task.message
    assert "never" not in world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()


def test_a_command_runs_in_the_tasks_container_in_a_step_of_its_job(podman_world, image) -> None:
    """``TaskExec`` on Slurm for a task with an image: ENGINE exec, in a step of the task's job."""
    world = podman_world
    job_id = submit(world, f"""
name: reachable
image: {image}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 128}}
    commands:
      - echo in-the-box > /tmp/only-here
      - echo started
      - {HOLD}
""")
    key = TaskKey(job_id, 0, "main", 0)
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: "started" in world.backend.read_log(key).data.decode(), timeout=60, what="the task to start")
    with world.db.session() as s:
        node = s.scalars(select(TaskRow).where(TaskRow.job_id == job_id)).one().node
    plan = world.backend.exec_plan(key, node, ["sh", "-c", "cat /tmp/only-here; head -1 /etc/os-release; exit 3"],
                                   tty=False)
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=scaled(60),
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["in-the-box", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"']
    release(world, job_id)
