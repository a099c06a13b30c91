"""The local backend runs a task whose launch names an image in a Podman container (runc),
with the test image that ``scripts/dev-image.sh`` builds offline."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from podman_support import needs_podman

from tests.backends.conftest import LocalHarness
from tests.backends.test_local_run_as import TASK_USER, public_dir, task_user  # noqa: F401 - fixtures
from trainyard.api.server import log_container_support
from trainyard.backends import containercgroup
from trainyard.backends.base import GpuInfo, Mount, SuspendRequest, TaskKey, TaskLaunch
from trainyard.backends.containers import (
    NO_CDI,
    ContainerEngine,
    ContainerError,
    cdi_gpu_names,
    gpu_devices,
    memory_cgroup,
)
from trainyard.backends.local import taskfiles
from trainyard.backends.local.backend import LocalBackend
from trainyard.core.exitcodes import IMAGE_UNAVAILABLE

MARKER = "trainyard-test-image bookworm"

pytestmark = needs_podman


def launch(local: LocalHarness, image: str, script: str, *, key: TaskKey | None = None, grace: float = 30.0,
           env: dict[str, str] | None = None, mounts: tuple[Mount, ...] = (), memory_mb: int = 512) -> TaskKey:
    key = key or local.new_key()
    local.backend.launch(TaskLaunch(key, local.node, script, env or {}, grace_seconds=grace, image=image,
                                    mounts=mounts, memory_mb=memory_mb, cpu_milli=1000))
    return key


def container_exists(local: LocalHarness, key: TaskKey) -> bool:
    spec = taskfiles.read_json(str(local.backend.task_dir(key) / taskfiles.SPEC))
    assert spec is not None
    return subprocess.run(["podman", "container", "exists", spec["container"]["name"]], check=False).returncode == 0


def test_a_task_with_an_image_runs_the_images_python_with_its_directories_and_env(podman_local, image, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from a storage\n")
    script = (
        "cat /etc/trainyard-test-image\n"
        "python3 -c 'import sys; print(\"python\", sys.executable, sys.version_info[:2])'\n"
        "echo \"job=$TRAINYARD_JOB_DIR pwd=$(pwd) greeting=$GREETING\"\n"
        "echo saved > \"$TRAINYARD_JOB_DIR/kept.txt\"\n"
        "cat \"$TRAINYARD_STORAGE_SHARED/data.txt\"\n"
        "touch /data/written 2>/dev/null && echo wrote || echo read-only\n"
    )
    key = launch(podman_local, image, script, env={"GREETING": "hello from env"},
                 mounts=(Mount(str(shared), "/data", read_only=True, name="shared"),))

    status = podman_local.wait_ended(key, timeout=60)

    log = podman_local.log(key)
    assert status.exit_code == 0, log
    assert MARKER in log  # the image's own files, not the host's
    assert "python /usr/bin/python3 (3, 11)" in log  # bookworm's python3
    job_dir = podman_local.backend.job_dir(key.job_id)
    assert f"job={job_dir} pwd={podman_local.backend.work_dir(key)} greeting=hello from env" in log
    assert (job_dir / "kept.txt").read_text() == "saved\n"  # the same directory, inside and out
    assert "from a storage" in log and "read-only" in log
    assert status.image_pull == f"{image} already on node {podman_local.node}"
    assert not container_exists(podman_local, key)  # removed once it ended


def test_two_container_tasks_reach_each_other_over_the_hosts_network(podman_local, image):
    port = podman_local.backend.allocate_ports(podman_local.node, 1)[0]
    server = launch(podman_local, image, (
        "python3 -c '\nimport socket\ns = socket.create_server((\"127.0.0.1\", PORT))\nc, _ = s.accept()\n"
        "c.sendall(b\"hello worker\")\nc.close()'\n").replace("PORT", str(port)),
        memory_mb=0)  # no limit: the client is exec'd
    client = launch(podman_local, image, (
        "python3 -c '\nimport socket, time\nfor _ in range(300):\n    try:\n"
        "        c = socket.create_connection((\"127.0.0.1\", PORT)); break\n"
        "    except OSError: time.sleep(0.1)\nprint(c.recv(100).decode())'\n").replace("PORT", str(port)))

    assert podman_local.wait_ended(client, timeout=60).exit_code == 0, podman_local.log(client)
    assert podman_local.wait_ended(server, timeout=60).exit_code == 0, podman_local.log(server)
    assert "hello worker" in podman_local.log(client)


# The script's shell traps TERM, so it outlives the program: the TERM the program prints
# came to it through the group (``catatonit -g``), not because its shell died (which ends
# the container and could kill the program before it prints, under load).
HANDLER = (
    "trap : USR1\ntrap 'echo \"shell got TERM\"; exit 143' TERM\n"
    "python3 -u -c '\nimport json, os, signal, sys, time\n"
    "def told(*_):\n"
    "    request = json.load(open(os.environ[\"TRAINYARD_SUSPEND_FILE\"]))\n"
    "    print(\"program got USR1:\", request[\"reason\"], flush=True)\n"
    "signal.signal(signal.SIGUSR1, told)\n"
    "signal.signal(signal.SIGTERM, lambda *_: (print(\"program got TERM\", flush=True), sys.exit(3)))\n"
    "print(\"ready\", flush=True)\nwhile True: time.sleep(0.05)'\n"
    "echo \"program ended with $?\"\n"
)


def test_stop_and_suspend_reach_the_program_inside_the_container(podman_local, image):
    key = launch(podman_local, image, HANDLER)
    podman_local.wait_log(key, "ready", timeout=60)

    # The request file, then the signal to the task's group (the engine's client), which
    # proxies it into the container, to the whole group of the task's script.
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    podman_local.backend.suspend(key, SuspendRequest("preempted for job 9", deadline, "SIGUSR1"))
    podman_local.wait_log(key, "program got USR1: preempted for job 9")
    podman_local.backend.stop(key, grace_seconds=20)
    status = podman_local.wait_ended(key, timeout=30)

    assert "program got TERM\nshell got TERM\n" in podman_local.log(key)
    assert status.exit_code is not None and status.exit_code != 0
    assert not container_exists(podman_local, key)


def test_a_container_ignoring_sigterm_is_killed_and_removed_after_the_grace(podman_local, image):
    key = launch(podman_local, image, "trap '' TERM\necho ready\nwhile true; do sleep 0.1; done\n", grace=1)
    podman_local.wait_log(key, "ready", timeout=60)

    podman_local.backend.stop(key, grace_seconds=1)
    status = podman_local.wait_ended(key, timeout=30)

    assert status.signal == signal.SIGKILL
    assert not container_exists(podman_local, key)


def test_a_container_over_its_memory_limit_ends_out_of_memory_and_its_cgroup_goes(podman_local, image):
    key = launch(podman_local, image, "python3 -c 'x = bytearray(400 * 1024 * 1024)'\n", memory_mb=64)

    status = podman_local.wait_ended(key, timeout=60)

    assert status.exit_code == 137
    assert status.reason == "OUT_OF_MEMORY"
    assert "killed by the kernel at its memory limit of 64 MB" in status.message
    spec = taskfiles.read_json(str(podman_local.backend.task_dir(key) / taskfiles.SPEC))
    assert spec is not None
    plan = spec["container"]["cgroup"]
    assert not any(Path(root + plan["relative"]).exists() for root in plan["roots"])


def test_a_container_within_its_memory_limit_has_no_out_of_memory_reason(podman_local, image):
    key = launch(podman_local, image, "python3 -c 'x = bytearray(8 * 1024 * 1024)'\nexit 3\n", memory_mb=128)

    status = podman_local.wait_ended(key, timeout=60)

    assert (status.exit_code, status.reason) == (3, "")


def test_a_missing_image_fails_the_task_with_the_pull_error(podman_local):
    key = launch(podman_local, "localhost/trainyard-no-such-image:1", "echo never\n")

    status = podman_local.wait_ended(key, timeout=120)

    assert status.exit_code == 125
    assert f"could not pull localhost/trainyard-no-such-image:1 on node {podman_local.node}" in status.message
    assert status.image_pull.startswith("could not pull")
    assert "never" not in podman_local.log(key)
    # No registry answered (connection refused): a later try may pass, so no reason says otherwise.
    assert status.reason == ""
    assert "connection refused" in podman_local.log(key)  # the pull's output is in the task log


def test_an_invalid_image_name_ends_the_task_for_good_with_podmans_reason(podman_local):
    key = launch(podman_local, "localhost/Trainyard-Invalid:1", "echo never\n")

    status = podman_local.wait_ended(key, timeout=120)

    assert (status.exit_code, status.reason) == (125, IMAGE_UNAVAILABLE)
    assert status.message == (f"could not pull localhost/Trainyard-Invalid:1 on node {podman_local.node}: "
                              "repository name must be lowercase")
    assert "repository name must be lowercase" in podman_local.log(key)


def test_without_a_container_engine_the_launch_says_what_to_install(tmp_path):
    local = LocalHarness(tmp_path / "state", containers=None)
    with pytest.raises(ContainerError, match="needs a container engine"):
        launch(local, "python:3.12", "true\n")


def test_gpus_reach_a_container_as_the_cdi_devices_the_toolkit_declares(tmp_path):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": "0"}, {"name": "1"}, {"name": "GPU-abc"}, {"name": "all"}],
    }))
    gpus = [GpuInfo(0, "A100", 40_000), GpuInfo(1, "A100", 40_000), GpuInfo(2, "A100", 40_000, uuid="GPU-abc")]
    names = cdi_gpu_names([cdi, tmp_path / "absent"])

    assert names == {"0", "1", "GPU-abc", "all"}
    assert gpu_devices((1,), gpus, names) == ("1",)
    assert gpu_devices((2,), gpus, names) == ("GPU-abc",)  # by UUID when the spec names them so
    with pytest.raises(ContainerError, match="CDI spec"):
        gpu_devices((0,), gpus, set())
    assert NO_CDI.startswith("this node has NVIDIA GPUs but no CDI spec")


def test_on_cgroup_v2_the_limit_is_memory_max_and_oom_kills_come_from_memory_events(tmp_path):
    """This machine's cgroups are v1 (hybrid); v2 is checked against a directory tree laid
    out as the kernel's (the stand-in: files are plain files here)."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (tmp_path / "mounts").write_text(f"cgroup2 {root} cgroup2 rw,nosuid 0 0\n")
    for directory in (root, root / "trainyard", root / "trainyard" / "containers"):
        directory.mkdir(exist_ok=True)
        (directory / "cgroup.subtree_control").write_text("")
    leaf = root / "trainyard" / "containers" / "c1"
    leaf.mkdir()
    for name in ("memory.max", "memory.swap.max", "cgroup.subtree_control"):
        (leaf / name).write_text("")
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")

    plan = memory_cgroup("c1", 256, mounts=str(tmp_path / "mounts"))
    assert plan is not None
    watch = containercgroup.make(plan)

    assert plan["version"] == 2 and plan["relative"] == "/trainyard/containers/c1"
    assert watch is None
    assert (leaf / "memory.max").read_text() == str(256 * 1024 * 1024)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (root / "cgroup.subtree_control").read_text() == "+memory"
    assert containercgroup.oom_kills(plan, watch) == 1
    assert memory_cgroup("c1", 0, mounts=str(tmp_path / "mounts")) is None  # no limit, no cgroup


def test_under_a_task_account_the_container_runs_as_its_uid_and_gid(task_user, public_dir, image):  # noqa: F811
    engine = ContainerEngine.find("podman", "runc")
    local = LocalHarness(public_dir / "state", run_as=TASK_USER, containers=engine)
    key = launch(local, image, "id -u; id -g; echo mine > owned.txt\n")

    status = local.wait_ended(key, timeout=60)

    assert status.exit_code == 0, local.log(key)
    assert local.log(key).split() == [str(task_user.pw_uid), str(task_user.pw_gid)]
    assert (local.backend.work_dir(key) / "owned.txt").stat().st_uid == task_user.pw_uid


def test_a_gpu_node_without_a_cdi_spec_is_named_at_start_up_and_fails_gpu_tasks_in_containers(tmp_path, caplog):
    engine = ContainerEngine.find("podman", "runc")
    backend = LocalBackend(tmp_path / "state", gpus=[GpuInfo(0, "H100", 81_559, uuid="GPU-1")], containers=engine)
    backend.cdi_gpus = set()  # this machine has no NVIDIA Container Toolkit either way

    with caplog.at_level(logging.WARNING):
        log_container_support(backend)
    with pytest.raises(ContainerError, match="no CDI spec"):
        backend.launch(TaskLaunch(TaskKey(1, 0, "m", 0), backend.inventory()[0].name, "true\n", {}, gpus=(0,),
                                  image="localhost/trainyard-test:bookworm"))

    assert NO_CDI in caplog.text
