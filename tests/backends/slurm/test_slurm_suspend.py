"""Suspension on a real Slurm cluster: the contract of ``docs/runtime.md`` end to end (the
request file, the signal, exit 85, SUSPENDED, resumed with ``TRAINYARD_RESUMED=1`` from the
saved state), and ``trainyard.runtime`` on the task's PYTHONPATH on the compute node."""

from __future__ import annotations

import json
import pwd
import stat

import pytest
from e2e.server import wait_until
from sqlalchemy import select

from slurm.cluster import cancel_all, drive, submit
from trainyard.backends.base import Suspender, SuspendRequest, TaskKey, TaskLaunch
from trainyard.backends.slurm.backend import SlurmBackend
from trainyard.controller.scheduling import preempt_jobs
from trainyard.core.clock import SystemClock
from trainyard.scheduler.snapshot import Preempt
from trainyard.services.specs import StoredSpecs
from trainyard.store.rows import AttemptRow, TaskRow

STEPS = 400
# A deterministic loop that keeps its place in the job's lasting state when asked to
# suspend; slow in its first attempt (so that it is still running when it is asked), fast
# once resumed. Run by the compute node's own python3, which has nothing of Trainyard's.
TRAINING = f"""
name: suspendable
jobRetryCount: 0
preemption: suspend
suspendGracePeriodSeconds: 60
taskRoles:
  main:
    commands:
      - |
        python3 - <<'PY'
        import time
        from trainyard import runtime
        state = runtime.get_state({{"i": 0, "total": 0}})
        i, total = state["i"], state["total"]
        print("attempt", runtime.attempt(), "resumed", runtime.resumed(), "from", i, runtime.__file__, flush=True)
        while i < {STEPS}:
            if runtime.should_suspend():
                runtime.set_state({{"i": i, "total": total}})
                print("suspending at", i, "asked:", runtime.suspend_request()["reason"], flush=True)
                runtime.suspend_done()
            total += i * i
            i += 1
            time.sleep(0 if runtime.resumed() else 0.05)
        print("total", total, flush=True)
        PY
"""


def log_of(world, key: TaskKey) -> str:
    return "".join(line for line in world.backend.read_log(key).data.decode().splitlines(keepends=True)
                   if not line.startswith("slurmstepd"))


@pytest.mark.parametrize("kind", ["world", "accounts_world"])
def test_a_suspended_job_saves_exits_85_waits_suspended_and_resumes_where_it_stopped(
        kind: str, request: pytest.FixtureRequest) -> None:
    """Also as the owner's account in its sandbox: the request is its file (0400) in the
    folder its env names, and the state it saves is in its job directory, as it is locally."""
    world = request.getfixturevalue(kind)
    assert isinstance(world.backend, Suspender)
    job_id = submit(world, TRAINING)
    first, second = TaskKey(job_id, 0, "main", 0), TaskKey(job_id, 1, "main", 0)
    drive(world, job_id, states=("RUNNING",))
    wait_until(lambda: "attempt 0" in log_of(world, first), timeout=30, what="the task to start")
    with world.db.session() as s:
        assert preempt_jobs(s, [Preempt(job_id, 0, "suspended for job 99", 0, suspend=True)], SystemClock(),
                            StoredSpecs().of) == [job_id]
    # The controller tells the task (request file, then SIGUSR1 through Slurm); the task
    # saves and exits 85; the job waits SUSPENDED and is placed again as attempt 1.
    job = drive(world, job_id, timeout=60)
    assert job.state == "SUCCEEDED" and job.attempt == 1 and job.retries_used == 0, job.state_message
    copy = world.backend.task_python / "trainyard" / "runtime.py"
    before, after = log_of(world, first).splitlines(), log_of(world, second).splitlines()
    assert before[0] == f"attempt 0 resumed False from 0 {copy}"
    stopped_at = int(before[1].split()[2])
    assert 0 < stopped_at < STEPS and before[1].endswith("asked: suspended for job 99"), before
    assert after == [f"attempt 1 resumed True from {stopped_at} {copy}", f"total {sum(i * i for i in range(STEPS))}"]
    task_dir = world.backend.task_dir(first)
    if kind == "world":
        asked = task_dir / "suspend.json"
    else:
        asked = task_dir.with_name(f"{task_dir.name}.suspend") / "suspend.json"
        owner = pwd.getpwnam("ty-alice")
        assert (asked.stat().st_uid, stat.S_IMODE(asked.stat().st_mode)) == (owner.pw_uid, 0o400)
        assert not (task_dir / "suspend.json").exists()
    said = json.loads(asked.read_text())
    assert (said["reason"], said["signal"]) == ("suspended for job 99", "SIGUSR1")
    with world.db.session() as s:
        attempts = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)).all()
        assert [a.state for a in attempts] == ["SUSPENDED", "SUCCEEDED"]
        task = s.scalars(select(TaskRow).where(TaskRow.attempt_id == attempts[0].id)).one()
        assert (task.state, task.exit_code) == ("STOPPED", 85)
        assert "saved its state" in task.message, task.message
    assert not (world.backend.task_dir(second) / "suspend.json").exists()  # a new attempt starts unasked


def test_the_system_python_imports_the_runtime_and_the_job_s_pythonpath_is_kept(world, slurm) -> None:
    backend = SlurmBackend(world.tmp / "runtime")
    node = backend.inventory()[0].name
    key = TaskKey(1, 0, "main", 0)
    script = ('echo "$PYTHONPATH"\n'
              "/usr/bin/python3 -c 'from trainyard import runtime; print(runtime.attempt(), runtime.__file__)'\n")
    try:
        backend.launch(TaskLaunch(key, node, script, {"PYTHONPATH": "/opt/mine", "TRAINYARD_ATTEMPT": "2"},
                                  cpu_milli=1000, memory_mb=64))
        wait_until(lambda: not backend.observe([key])[key].running, timeout=30, what="the task to end")
        assert backend.observe([key])[key].exit_code == 0, backend.read_log(key).data
        lines = wait_until(lambda: len(out := backend.read_log(key).data.decode().splitlines()) >= 2 and out,
                           what="the whole log")
        # A request for a task that has ended changes nothing.
        backend.suspend(key, SuspendRequest("too late", SystemClock().now(), "SIGUSR1"))
    finally:
        cancel_all(slurm, backend.name_prefix)
    assert lines[:2] == [f"{backend.task_python}:/opt/mine", f"2 {backend.task_python}/trainyard/runtime.py"]
    assert not (backend.task_dir(key) / "suspend.json").exists()
    assert not (backend.submission_dir(key) / "suspend.json").exists()


def test_one_signal_tells_every_task_of_the_slurm_job_after_each_has_its_request(world, slurm) -> None:
    backend = SlurmBackend(world.tmp / "gang")
    node = backend.inventory()[0].name
    # Each task's own handler reads its request file when the signal comes: it must be there.
    script = ('trap \'echo "told: $(cat "$TRAINYARD_SUSPEND_FILE")"; exit 85\' USR1\n'
              "echo ready\nsleep 300 & wait\n")
    keys = [TaskKey(1, 0, "worker", index) for index in (0, 1)]
    request = SuspendRequest("suspended by its owner", SystemClock().now(), "SIGUSR1")
    try:
        backend.launch_gang([TaskLaunch(key, node, script, {}, cpu_milli=1000, memory_mb=64) for key in keys])
        for key in keys:
            wait_until(lambda key=key: "ready" in backend.read_log(key).data.decode(), timeout=30,
                       what=f"task {key.index} to start")
        backend.suspend(keys[0], request)  # the controller asks each task in turn...
        backend.suspend(keys[1], request)  # ...and the second finds its Slurm job signalled already
        statuses = wait_until(lambda: not any((found := backend.observe(keys))[k].running for k in keys) and found,
                              timeout=30, what="both tasks to end")
    finally:
        cancel_all(slurm, backend.name_prefix)
    for key in keys:
        # Their own status, recorded by the task runner that outlived the signal.
        assert (statuses[key].exit_code, statuses[key].signal) == (85, None), backend.read_log(key).data
        told = [line for line in backend.read_log(key).data.decode().splitlines() if line.startswith("told: ")]
        assert [json.loads(line.removeprefix("told: "))["reason"] for line in told] == ["suspended by its owner"]
