"""Borrowing on a real Slurm cluster (issue 30): a job over its VC's quota runs on another VC's
idle GPUs, is suspended when that VC's job needs them, and resumes once they are idle again.
On partition ``first`` (n1 alone, 4 GPUs): VCs vision and speech guarantee 2 each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from slurm.cluster import drive
from slurm.conftest import World, make_world
from trainyard.core.clock import SystemClock
from trainyard.core.transitions import EventKind
from trainyard.services import admin, auth
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.events import job_events
from trainyard.store.rows import AttemptRow, JobRow

SLEEP = "name: {name}\ndefaults: {{virtualCluster: {vc}}}\ntaskRoles:\n  main:\n" \
        "    resourcePerInstance: {{gpu: 2}}\n    commands: ['sleep 600']\n"
# Keeps running, and saves and exits when asked to suspend (docs/runtime.md).
SUSPENDABLE = """
name: over
preemption: suspend
suspendGracePeriodSeconds: 60
defaults: {virtualCluster: vision}
taskRoles:
  main:
    resourcePerInstance: {gpu: 2}
    commands:
      - |
        python3 - <<'PY'
        import time
        from trainyard import runtime
        state = runtime.get_state({"i": 0})
        print("attempt", runtime.attempt(), "from", state["i"], flush=True)
        while True:
            if runtime.should_suspend():
                runtime.set_state(state)
                runtime.suspend_done()
            state["i"] += 1
            time.sleep(0.05)
        PY
"""


@pytest.fixture
def first(slurm, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    """``world`` on partition ``first`` with VCs vision (alice) and speech (bob), 2 GPUs each."""
    for world in make_world(slurm, tmp_path, _sqlite_template, partition="first"):
        clock = SystemClock()
        with world.db.session() as s:
            auth.create_user(s, "bob", is_admin=False, clock=clock)
            for vc, user in (("vision", "alice"), ("speech", "bob")):
                admin.create_vc(s, vc, gpus=2, model=None, preemption=True, clock=clock)
                admin.grant_vc(s, vc, user)
        yield world


def submit_as(world: World, user: str, text: str) -> int:
    with world.db.session() as s:
        return job_service.submit_job(s, auth.get_user(s, user), parse_job(text), clock=SystemClock()).id


def attempts(world: World, job_id: int) -> list[tuple[str, bool]]:
    with world.db.session() as s:
        rows = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number))
        return [(a.state, a.borrowed) for a in rows]


def test_a_borrowed_job_is_suspended_for_the_lender_and_resumes_on_borrowed_gpus_again(first: World) -> None:
    own = submit_as(first, "alice", SLEEP.format(name="own", vc="vision"))
    drive(first, own, states=("RUNNING",))
    over = submit_as(first, "alice", SUSPENDABLE)
    drive(first, over, states=("RUNNING",))
    assert attempts(first, own) == [("RUNNING", False)] and attempts(first, over) == [("RUNNING", True)]

    lender = submit_as(first, "bob", SLEEP.format(name="lender", vc="speech"))
    drive(first, lender, states=("RUNNING",), timeout=90)
    assert attempts(first, over)[0] == ("SUSPENDED", True)
    with first.db.session() as s:  # no room for it: vision's quota is in use, speech's GPUs too
        assert s.get(JobRow, over).state == "SUSPENDED"
        kinds = [e.kind for e in job_events(s, over)]
    assert EventKind.SUSPEND_REQUESTED in kinds and EventKind.SUSPENDED in kinds

    with first.db.session() as s:
        job_service.request_stop(s, auth.get_user(s, "bob"), lender, clock=SystemClock())
    job = drive(first, over, states=("RUNNING",), timeout=90, until=lambda j: j.attempt == 1)
    assert job.attempt == 1 and attempts(first, over) == [("SUSPENDED", True), ("RUNNING", True)]
