"""The scheduler's worker process (``controller/schedule_worker.py``): the same decisions as
in process, and a worker killed costs no cycle: that cycle runs in process, the death is
logged, and the next cycle has a new worker."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import replace
from types import MappingProxyType

import pytest
from deadlines import scaled
from e2e.server import wait_until

from trainyard.controller.schedule_worker import ScheduleRunner
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import GpuSlot, NodeState, PendingJob, Snapshot, TaskRequest, VirtualCluster


def snapshot() -> Snapshot:
    """Two nodes of 4 GPUs, two VCs, a mix that starts some jobs and keeps others waiting."""
    nodes = tuple(NodeState(f"n{i}", 32_000, 256_000, tuple(GpuSlot(g, "A100", 81_920, 0, "") for g in range(4)))
                  for i in range(2))
    pending = tuple(
        PendingJob(job_id, 1 + job_id % 2, float(job_id),
                   tuple(TaskRequest("w", i, 1000, 1000, 1024, ()) for i in range(1 + job_id % 3)),
                   "alice", ("a", "b")[job_id % 2], None)
        for job_id in range(1, 13)
    )
    return Snapshot(nodes, pending, now=100.0, vcs=(VirtualCluster("a", {"A100": 4}), VirtualCluster("b", {"A100": 2})))


@pytest.fixture
def runner():
    made = ScheduleRunner(worker=True)
    made.start()
    yield made
    made.stop()


def test_the_worker_decides_what_the_scheduler_decides_in_process(runner) -> None:
    decisions = runner.decide(snapshot())
    assert decisions == schedule(snapshot())
    assert decisions.starts and decisions.waits  # a snapshot that says something both ways
    assert runner.worker_pid() != os.getpid()
    assert runner.transfer_bytes > 0 and runner.worker_seconds > 0


def test_a_killed_worker_is_logged_the_cycle_runs_in_process_and_a_new_worker_serves_the_next(
    runner, caplog
) -> None:
    first = runner.worker_pid()
    os.kill(first, signal.SIGKILL)
    with caplog.at_level(logging.ERROR, logger="trainyard.controller.schedule_worker"):
        assert runner.decide(snapshot()) == schedule(snapshot())
    assert runner.restarts == 1 and runner.worker_seconds == 0  # this cycle ran here
    assert any("worker process has died" in r.getMessage() for r in caplog.records)
    second = runner.worker_pid()
    assert second not in (first, os.getpid())
    assert runner.decide(snapshot()) == schedule(snapshot())
    assert runner.restarts == 1  # the new worker answered


def test_an_error_inside_schedule_is_raised_here_as_in_process_and_keeps_the_worker(runner) -> None:
    broken = Snapshot((), (PendingJob(1, 1, 0.0, None, "alice", "a", None),))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        schedule(broken)
    with pytest.raises(TypeError):
        runner.decide(broken)
    assert runner.decide(snapshot()) == schedule(snapshot())
    assert runner.restarts == 0


def test_a_snapshot_that_cannot_be_pickled_is_scheduled_in_process(runner, caplog) -> None:
    labelled = tuple(replace(n, labels=MappingProxyType({"rack": "r1"})) for n in snapshot().nodes)
    odd = replace(snapshot(), nodes=labelled)  # a mappingproxy: pickle refuses it
    with caplog.at_level(logging.ERROR, logger="trainyard.controller.schedule_worker"):
        assert runner.decide(odd) == schedule(odd)
    assert any("cannot be sent" in r.getMessage() for r in caplog.records)
    assert runner.restarts == 0


def test_a_controller_with_a_worker_runs_jobs_and_survives_its_worker_killed(make_world, caplog) -> None:
    world = make_world(scheduler_worker=True)
    world.controller.scheduler.start()
    first = world.controller.scheduler.worker_pid()
    assert world.drive(world.submit("name: one\ntaskRoles:\n  m:\n    commands: ['true']\n")).state == "SUCCEEDED"
    os.kill(first, signal.SIGKILL)
    with caplog.at_level(logging.ERROR, logger="trainyard.controller.schedule_worker"):
        assert world.drive(world.submit("name: two\ntaskRoles:\n  m:\n    commands: ['true']\n")).state \
            == "SUCCEEDED"
    assert world.controller.scheduler.restarts == 1
    assert any("worker process has died" in r.getMessage() for r in caplog.records)
    assert world.drive(world.submit("name: three\ntaskRoles:\n  m:\n    commands: ['true']\n")).state \
        == "SUCCEEDED"
    assert world.controller.scheduler.worker_pid() not in (first, os.getpid())


def _gone(pid: int) -> bool:
    """Whether the process has ended (a zombie waiting for init to reap it counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_worker_whose_server_is_killed_outright_ends_itself(tmp_path) -> None:
    """``kill -9`` of the server cannot shut its worker down; the worker notices its parent gone."""
    script = tmp_path / "server.py"
    script.write_text(
        "import os, signal\n"
        "from trainyard.controller.schedule_worker import ScheduleRunner\n"
        "if __name__ == '__main__':  # spawn imports the main module in the worker\n"
        "    runner = ScheduleRunner(worker=True)\n"
        "    runner.start()\n"
        "    print(runner.worker_pid(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=scaled(60),
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL, done.stderr
    worker = int(done.stdout.split()[0])
    wait_until(lambda: _gone(worker), timeout=10, what=f"the orphaned worker {worker} to end")
