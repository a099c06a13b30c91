"""A Slurm task's ports are checked free on its node as it starts (``runners.TASK_RUNNER``):
one another program holds there is a platform fault (the task's ``fault`` file), which the
controller retries as a new attempt with new ports, never a failed job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from slurm.cluster import drive, node_argv, submit
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.slurm import submission
from trainyard.backends.slurm.backend import PORT_RANGE, SlurmBackend
from trainyard.store.rows import JobEventRow, JobRow


@contextmanager
def listening(argv_prefix: list[str] | None = None) -> Iterator[int]:
    """A program that listens on a port of ``PORT_RANGE`` (run through ``argv_prefix``'s
    command line, e.g. on a node), until the block ends; yields the port."""
    code = ("import socket, sys\n"
            f"for port in range({PORT_RANGE.start}, {PORT_RANGE.stop}):\n"
            "    s = socket.socket()\n"
            "    try:\n"
            "        s.bind(('0.0.0.0', port))\n"
            "    except OSError:\n"
            "        s.close(); continue\n"
            "    s.listen(); print(port, flush=True); sys.stdin.read(); break\n")
    argv = [sys.executable, "-c", code]
    holder = subprocess.Popen(argv if argv_prefix is None else argv_prefix + argv, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        yield int(holder.stdout.readline())
    finally:
        holder.kill()
        holder.wait()


def _path_without_python3(tmp_path: Path) -> str:
    """A PATH with the tools the runner's port check uses, and no python3: /proc/net/tcp is read."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("cat", "awk", "sort", "tr", "hostname", "mv"):
        found = shutil.which(tool)
        assert found is not None
        (folder / tool).symlink_to(found)
    return str(folder)


@pytest.mark.parametrize("check", ["python3", "proc"])
def test_a_task_whose_port_is_held_is_not_started_and_ends_with_the_fault_not_a_status(
        tmp_path: Path, check: str) -> None:
    backend = SlurmBackend(tmp_path / "slurm")
    key = TaskKey(1, 0, "main", 0)
    task_dir = backend.task_dir(key)
    with listening() as held:
        task = TaskLaunch(key=key, node="n1", script="touch started\n", env={}, ports=(held + 1, held))
        submission.write_task_files(task_dir, task, {}, backend.job_dir(1), backend.task_python)
        assert (task_dir / "ports").read_text() == f"{held + 1}\n{held}\n"
        env = {"SLURMD_NODENAME": "n1", "PATH": os.environ["PATH"] if check == "python3"
               else _path_without_python3(tmp_path)}
        done = subprocess.run(["/bin/bash", str(backend.task_runner), str(task_dir)], env=env, timeout=60)
    assert done.returncode == 0  # the gang runner writes no exit status of its own either
    assert not (task_dir / "exit").exists() and not (task_dir / "work" / "started").exists()
    why = f"port(s) {held} already held on node n1 by another program; the task was not started"
    assert (task_dir / "fault").read_text() == why + "\n"
    assert f"trainyard: {why}" in backend.read_log(key).data.decode()
    # Read before Slurm is asked anything: ended, with no exit status (LOST) and the reason.
    [status] = backend.observe([key]).values()
    assert (status.running, status.exit_code, status.lost, status.message) == (False, None, False, why)


def test_a_port_held_on_the_tasks_node_is_a_platform_fault_retried_with_new_ports(world) -> None:
    """The backend hands out, once, a port another program listens on at the task's node:
    the first attempt is lost with that reason, the second (new ports) succeeds."""
    holders = ExitStack()
    given: list[int] = []
    allocate = world.backend.allocate_ports

    def allocate_a_held_port_once(node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        ports = allocate(node, count, taken)
        if not given and count:
            ports[0] = holders.enter_context(listening(node_argv(world.backend.commands, node, [])))
        given.extend(ports)
        return ports

    world.backend.allocate_ports = allocate_a_held_port_once
    with holders:
        job_id = submit(world, """
name: ports
jobRetryCount: 0
taskRoles:
  main:
    resourcePerInstance: {cpu: 1, memoryMB: 64, ports: {http: 1}}
    commands:
      - echo "attempt $TRAINYARD_ATTEMPT on $PAI_PORT_LIST_main_0_http"
""")
        job = drive(world, job_id, timeout=60)
    held = given[0]
    with world.db.session() as s:
        row = s.get(JobRow, job_id)
        assert (job.state, job.retries_used) == ("SUCCEEDED", 0)
        assert [a.state for a in row.attempts] == ["LOST", "SUCCEEDED"]
        lost = row.attempts[0].tasks[0]
        node = lost.node
        why = f"port(s) {held} already held on node {node} by another program; the task was not started"
        assert lost.state == "LOST" and why in lost.message
        assert row.attempts[0].tasks[0].ports == {"http": [held]}
        assert held not in row.attempts[1].tasks[0].ports["http"]
        assert row.attempts[1].tasks[0].node != node  # retried elsewhere (it fits elsewhere)
        events = s.scalars(select(JobEventRow).where(JobEventRow.job_id == job_id)).all()
        (retried,) = [e.message for e in events if e.kind == "platform-retried"]
        assert why in retried and "without spending jobRetryCount" in retried
    second = TaskKey(job_id, 1, "main", 0)
    master_port = given[-1]
    assert (world.backend.task_dir(second) / "ports").read_text().split() == [
        str(p) for p in (*row.attempts[1].tasks[0].ports["http"], master_port)]
    assert world.backend.read_log(second).data.decode().startswith("attempt 1 on ")
