"""A training loop that uses ``trainyard.runtime`` from the machine's own python3, suspended
under the controller with the real local backend and store (SQLite and PostgreSQL): told
(the request file, then SIGUSR1), it saves its place and exits 85, the job waits
SUSPENDED and resumes as a new attempt (``resumed()``) from the state it saved, to the
same result as an uninterrupted run. (``test_suspension.py`` covers the platform's side.)"""

from __future__ import annotations

import os

import pytest
from e2e.server import wait_until

from trainyard.backends.base import TaskKey
from trainyard.controller.scheduling import preempt_jobs
from trainyard.core.clock import SystemClock
from trainyard.scheduler.snapshot import Preempt
from trainyard.services.specs import StoredSpecs

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no /usr/bin/python3")
STEPS = 400
TRAINING = f"""
name: suspendable
preemption: suspend
suspendGracePeriodSeconds: 60
taskRoles:
  main:
    commands:
      - |
        /usr/bin/python3 - <<'PY'
        import time
        from trainyard import runtime
        state = runtime.get_state({{"i": 0, "total": 0}})
        i, total = state["i"], state["total"]
        print("attempt", runtime.attempt(), "resumed", runtime.resumed(), "from", i, flush=True)
        while i < {STEPS}:
            if runtime.should_suspend():
                runtime.set_state({{"i": i, "total": total}})
                print("suspending at", i, flush=True)
                runtime.suspend_done()
            total += i * i
            i += 1
            time.sleep(0 if runtime.resumed() else 0.05)
        print("total", total, flush=True)
        PY
"""


def suspend(db, job_id: int) -> None:
    with db.session() as s:
        assert preempt_jobs(s, [Preempt(job_id, 0, "suspended for job 99", 0, suspend=True)], SystemClock(),
                            StoredSpecs().of) == [job_id]


def test_a_suspended_job_saves_exits_85_and_resumes_where_it_stopped(world) -> None:
    backend = world.backend
    job_id = world.submit(TRAINING)
    first, second = TaskKey(job_id, 0, "main", 0), TaskKey(job_id, 1, "main", 0)
    world.drive(job_id, states=("RUNNING",))
    wait_until(lambda: "attempt 0" in backend.read_log(first).data.decode(), timeout=20, what="the task to start")
    suspend(world.db, job_id)
    job = world.drive(job_id)
    assert job.state == "SUCCEEDED" and job.attempt == 1 and job.retries_used == 0, job.state_message
    before = backend.read_log(first).data.decode().splitlines()
    stopped_at = int(before[1].removeprefix("suspending at "))
    assert before[0] == "attempt 0 resumed False from 0" and 0 < stopped_at < STEPS, before
    assert backend.read_log(second).data.decode().splitlines() == [
        f"attempt 1 resumed True from {stopped_at}", f"total {sum(i * i for i in range(STEPS))}"]
    assert [a.state for a in world.attempts(job_id)] == ["SUSPENDED", "SUCCEEDED"]

