"""A real ``yard up --backend slurm``: killed with -9 and restarted while its Slurm jobs run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled
from e2e.server import Server, wait_until

from slurm.cluster import slurm_yard_up

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def slurm_server(slurm, tmp_path_factory) -> Iterator[Server]:
    """One ``yard up --backend slurm`` for the module (a start costs seconds): the start-up
    test reads its log, which keeps every start's lines, the restart test's too."""
    with slurm_yard_up(slurm, tmp_path_factory.mktemp("home")) as srv:
        yield srv


def _job(name: str, exit_code: int, gates) -> str:
    # The task records each start, then waits for its release file and exits.
    return f"""
name: {name}
taskRoles:
  main:
    resourcePerInstance: {{gpu: 2, cpu: 1, memoryMB: 128}}
    commands:
      - echo start >> {gates}/starts-{name}
      - echo running
      - while [ ! -e {gates}/release-{name} ]; do sleep 0.05; done
      - echo released
      - exit {exit_code}
"""


@pytest.fixture
def gates() -> Iterator[Path]:
    """A folder the tasks see (not under /tmp: the sandbox's /tmp is its own) and can search."""
    folder = Path(tempfile.mkdtemp(prefix="slurm-gates-", dir="/var/lib"))
    folder.chmod(0o1777)  # the tasks (their owners' accounts) write their starts there
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_restarted_server_readopts_slurm_jobs_by_id_and_records_ends_it_missed(slurm_server, slurm, gates) -> None:
    server = slurm_server
    client = server.admin()
    assert {n.name for n in client.nodes()} >= {"n1", "n2", "n3", "n4"}
    ended_while_down = client.submit(_job("down", 7, gates)).id
    still_running = client.submit(_job("alive", 0, gates)).id
    for job_id in (ended_while_down, still_running):
        wait_until(lambda job_id=job_id: client.logs(job_id) == b"running\n", timeout=30, what=f"job {job_id} to run")

    server.kill9()
    (gates / "release-down").touch()
    (state_dir,) = (server.home / "slurm").iterdir()  # one store, one cluster id
    exit_file = state_dir / "jobs" / str(ended_while_down) / "0" / "main-0-0" / "exit"
    wait_until(exit_file.exists, timeout=20, what="the released task to end while no server runs")

    server.start()
    client = server.admin()
    down = client.wait(ended_while_down, timeout=scaled(30))
    assert (down.state, down.exitCode) == ("FAILED", 7)
    assert client.job(still_running).state == "RUNNING"

    # `yard logs -f` follows the Slurm output file until the task ends.
    follow = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", "logs", "-f", str(still_running)],
                              env=server.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: client.logs(still_running) == b"running\n", timeout=10, what="the log")
    (gates / "release-alive").touch()
    out, err = follow.communicate(timeout=scaled(30))
    assert out == "running\nreleased\n", err
    assert client.wait(still_running, timeout=scaled(30)).state == "SUCCEEDED"

    for name in ("down", "alive"):
        assert (gates / f"starts-{name}").read_text() == "start\n", f"{name} started more than once"
    # Exactly one Slurm job per Trainyard job, under the name the backend gave it.
    names = slurm.run(["squeue", "--noheader", "--all", "--states=all", "--format=%F %j"]).stdout.splitlines()
    for job_id in (ended_while_down, still_running):
        name = (state_dir / "jobs" / str(job_id) / "0" / "slurm-gang" / "submitting").read_text()
        assert len([line for line in names if line.split()[1] == name]) == 1, (name, names)


def test_yard_up_says_at_start_up_what_tasks_on_slurm_can_reach(slurm_server) -> None:
    # As the local backend does (backends/local/isolation.py): as root, with bubblewrap, each
    # user's tasks run as their own account in the sandbox (issue 29); else a warning.
    log = slurm_server.log()
    if os.geteuid() == 0:
        # And that a task given part of a GPU is held to it, by its owner's MPS daemon on its node (issue 36).
        assert "INFO trainyard: fractional GPU shares on Slurm are enforced by NVIDIA MPS" in log, log[-2000:]
        assert "INFO trainyard: task isolation on Slurm: each Trainyard user's tasks run as their own OS account" \
            in log, log[-2000:]
        assert "storages at their mountPath, read-only enforced" in log
    else:
        assert "WARNING trainyard: task isolation on Slurm is weak: every task runs as the server's own" in log
        assert "fractional GPU shares are not enforced on Slurm without per-user task accounts" in log
