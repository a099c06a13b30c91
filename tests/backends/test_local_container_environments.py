"""A task that names an image *and* a Python environment (``yard env``): the environment's
folders are bound read-only at their paths in the container, and an environment whose
python the image cannot run ends the task before it starts, saying so."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from api.wheels import node_venv, tiny_wheel
from podman_support import needs_podman

from tests.backends.conftest import LocalHarness
from trainyard.backends.base import Mount, PythonEnvironment, TaskKey, TaskLaunch
from trainyard.backends.containers import ContainerEngine, ContainerTask, environment_binds, environment_check

# The host and the test image are both Debian bookworm: /usr/bin/python3 is python3.11 in both.
NODE_PYTHON = "/usr/bin/python3"


@pytest.fixture
def envs(tmp_path: Path) -> Iterator[Path]:
    """Where environments are kept: a folder root alone may change, as the environments'
    root is (a folder under a world-writable /tmp is never bound: ``unswappable``)."""
    if os.geteuid() != 0:
        yield tmp_path  # the engine runs as this account then: nothing of root's to swap
        return
    base = Path(tempfile.mkdtemp(prefix="trainyard-envs-", dir="/var/lib"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def test_an_environment_and_its_base_are_bound_read_only_at_their_paths() -> None:
    env = PythonEnvironment("/envs/alice/torch", ("/envs/alice/torch/bin", "/opt/conda/bin"))

    assert environment_binds(env) == (Mount("/envs/alice/torch", "/envs/alice/torch", read_only=True),
                                      Mount("/opt/conda", "/opt/conda", read_only=True))
    assert environment_binds(None) == ()
    system = PythonEnvironment("/envs/alice/x", ("/envs/alice/x/bin", "/usr/bin"))  # a base declared at /usr
    assert environment_binds(system) == (Mount("/envs/alice/x", "/envs/alice/x", read_only=True),)


def test_the_check_runs_the_environments_python_in_the_image_with_the_environment_bound(tmp_path, envs) -> None:
    prefix = node_venv(envs / "v", sys.executable)  # pyenv's python: not in any image
    env = PythonEnvironment(str(prefix), (f"{prefix}/bin",))
    engine = ContainerEngine("podman", "/usr/bin/podman", "runc")
    task = ContainerTask(TaskKey(1, 0, "w", 0), "img:1", "n1", tmp_path, tmp_path / "s", tmp_path / "e",
                         user=(1001, 1001, ()))

    check = environment_check(engine, task, env, guarded=True)

    assert check is not None
    argv = check["argv"]
    assert argv[:4] == ["/usr/bin/podman", "--runtime", "runc", "run"]
    assert f"{prefix}:{prefix}:ro" in argv and "--user" in argv
    assert argv[-4:] == [f"{prefix}/bin/python", "img:1", "-c", "import sys"]
    assert f"its python is a link to {Path(sys.executable).resolve()} on the node" in check["error"]
    assert environment_check(engine, task, None) is None
    assert environment_check(engine, task, PythonEnvironment("/nowhere", ("/nowhere/bin",))) is None


def launch(local: LocalHarness, image: str, script: str, prefix: Path) -> TaskKey:
    key = local.new_key()
    local.backend.launch(TaskLaunch(key, local.node, script, {}, image=image, memory_mb=512, cpu_milli=1000,
                                    environment=PythonEnvironment(str(prefix), (f"{prefix}/bin",))))
    return key


@needs_podman
def test_a_task_in_an_image_runs_its_environments_python_and_packages(podman_local, image, tmp_path, envs) -> None:
    tiny_wheel(tmp_path / "wheels", "tinypkg", 'GREETING = "hello from tinypkg"\n')
    prefix = node_venv(envs / "tiny", NODE_PYTHON, tmp_path / "wheels", "tinypkg")
    script = (
        "cat /etc/trainyard-test-image\n"
        "python -c 'import sys, tinypkg; print(tinypkg.GREETING, sys.prefix)'\n"
        'echo "python=$(command -v python) venv=$VIRTUAL_ENV"\n'
        'touch "$VIRTUAL_ENV/written" 2>/dev/null && echo wrote || echo read-only\n'
    )
    key = launch(podman_local, image, script, prefix)

    status = podman_local.wait_ended(key, timeout=90)

    log = podman_local.log(key)
    assert status.exit_code == 0, log
    assert "trainyard-test-image bookworm" in log  # in the image
    assert f"hello from tinypkg {prefix}" in log  # with the environment's packages
    assert f"python={prefix}/bin/python venv={prefix}" in log and "read-only" in log
    assert not (prefix / "written").exists()


@needs_podman
def test_an_environment_whose_python_the_image_lacks_fails_the_task_saying_so(podman_local, image, envs):
    prefix = node_venv(envs / "pyenv", sys.executable)  # links to a python only this host has
    key = launch(podman_local, image, "echo never\n", prefix)

    status = podman_local.wait_ended(key, timeout=90)

    assert status.exit_code == 125
    assert f"the job's Python environment {prefix} cannot run in image {image}" in status.message
    assert f"a link to {Path(sys.executable).resolve()}" in status.message
    assert "never" not in podman_local.log(key)
