"""Elastic jobs resized in place by the live controller (``controller/elastic.py``), with
``sleep`` workers: what a stop, a lost worker or a worker finishing does in the middle of a
resize (the attack review of issue 34), and the job's views."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from e2e.server import wait_until
from sqlalchemy import select
from worlds import World

from trainyard.backends.base import TaskKey
from trainyard.core.clock import SystemClock
from trainyard.services.logs import find_log_targets
from trainyard.store.rows import JobEventRow, JobRow

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

HOG = "name: hog\ntaskRoles:\n  h:\n    resourcePerInstance: {gpu: %d}\n    commands: ['sleep 600']\n"


def elastic(low: int, high: int, command: str = "sleep 600", roles: str = "") -> str:
    return (f"name: el\ntaskRoles:\n{roles}  worker:\n    instances: {{min: {low}, max: {high}}}\n"
            f"    resourcePerInstance: {{gpu: 1}}\n    commands: [{command!r}]\n")


def started_beside_a_hog(world: World, text: str, hog_gpus: int) -> tuple[int, int]:
    hog = world.submit(HOG % hog_gpus)
    world.drive(hog, ("RUNNING",))
    job = world.submit(text)
    world.drive(job, ("RUNNING",))
    return job, hog


def resized(world: World, job: int, count: int = 1) -> None:
    world.drive(job, None, until=lambda _: sum(k == "resized" for k, _ in world.events(job)) >= count,
                what=f"{count} resize(s)")


def test_a_grow_restarts_only_the_elastic_roles_workers_and_a_stop_meanwhile_fails_none(make_world) -> None:
    world = make_world(gpus=3)
    job, hog = started_beside_a_hog(world, elastic(1, 3, roles="  side:\n    commands: ['sleep 600']\n"), 2)
    world.stop(hog)
    world.drive(hog, ("STOPPED",))
    resized(world, job)
    tasks = {(t.role, t.index): t for t in world.tasks(job)}
    assert tasks[("side", 0)].resizes == 0 and not tasks[("side", 0)].restart
    assert {("worker", 1), ("worker", 2)} <= set(tasks)
    assert world.events(job)[-1][1].startswith("grows from 1 to 3 worker(s): grew into idle GPUs")
    with world.db.session() as s:  # `yard logs --all` reads the workers it grew (the job file says 1)
        owner = s.get(JobRow, job).user
    targets = find_log_targets(world.db, world.controller.specs, owner, job, None, None)
    assert [t.label for t in targets] == ["side/0", "worker/0", "worker/1", "worker/2"]
    world.stop(job)  # while worker/0 restarts
    assert world.drive(job, ("STOPPED", "FAILED", "SUCCEEDED")).state == "STOPPED"
    assert [t.state for t in world.tasks(job) if t.state == "FAILED"] == [], world.explain(job)


def test_a_worker_stopped_for_a_resize_is_told_so_and_the_size_it_restarts_at(make_world, tmp_path: Path) -> None:
    """As SIGTERM comes for a resize, the worker's request file says it (``runtime.resizing``):
    a handler can tell a resize from a stop of the job."""
    world = make_world(gpus=3)
    tell = ("import signal, sys, time\nfrom trainyard import runtime\n"
            "def told(*_):\n    print('resizing to', runtime.resizing(), flush=True)\n    sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, told)\n"
            "print('resizes', runtime.resizes(), 'now', runtime.resizing(), flush=True)\ntime.sleep(600)\n")
    (tmp_path / "tell.py").write_text(tell)
    job, hog = started_beside_a_hog(world, elastic(1, 3, f"exec {sys.executable} {tmp_path / 'tell.py'}"), 2)
    first = TaskKey(job, 0, "worker", 0, 0)
    wait_until(lambda: b"resizes 0 now None" in world.controller.backend.read_log(first).data,
               what="worker/0 to start")
    world.stop(hog)
    world.drive(hog, ("STOPPED",))
    resized(world, job)
    # (exec: a shell in front would die of the SIGTERM at once, and its end stop the group.)
    world.drive(job, None, until=lambda _: b"resizing to 3" in world.controller.backend.read_log(first).data,
                what="worker/0's first run to be told")
    again = TaskKey(job, 0, "worker", 0, 1)
    world.drive(job, None, until=lambda _: b"resizes 1 now None" in world.controller.backend.read_log(again).data,
                what="worker/0's second run, at the new size")
    # Its size over the attempt, in the API's view, `yard job` and the portal's job page.
    from trainyard.cli.render import job_detail as render_job
    from trainyard.services.views import job_detail as job_view

    with world.db.session() as s:
        row = s.get(JobRow, job)
        events = list(s.scalars(select(JobEventRow).where(JobEventRow.job_id == job).order_by(JobEventRow.id)))
        view = job_view(row, events, [], spec=world.controller.spec_of(row), now=SystemClock().now())
    assert [s.workers for s in view.attempts[0].sizes] == [1, 3]
    assert view.attempts[0].sizes[0].at == view.attempts[0].startedAt
    assert "  workers:    1 from 20" in render_job(view) and ", 3 from " in render_job(view)
    assert view.gpus == 3  # what it holds now (`yard jobs`' GPU column), not its minimum
    assert view.task_labels() == ["worker/0", "worker/1", "worker/2"]  # `yard logs`' hint, the portal's selector
    world.stop(job)
    world.drive(job, ("STOPPED",))


def test_a_worker_that_fails_as_the_last_one_running_is_no_resize(make_world) -> None:
    """A new user's trial saw "shrinks from 1 to 0 worker(s)" for a job of two workers: both
    ended in one pass of reconcile (torchrun's agents end together), worker/0 first. Nothing
    was left to resize; the attempt's outcome is the minimum's workers' (as any task's)."""
    from trainyard.controller.elastic import lost_worker
    from trainyard.store.rows import AttemptRow

    world = make_world(gpus=3)
    job = world.submit(elastic(1, 3))
    world.drive(job, None, until=lambda _: sum(t.state == "RUNNING" for t in world.tasks(job)) == 3,
                what="three workers to run")
    # Both of two, worker/0 first; and worker/0 and worker/1 of three, as every worker failed at
    # its start (the second trial: "shrinks from 2 to 1" of a job whose attempt was failing).
    for ended in ({0, 1, 2}, {0, 1}):
        with world.db.session() as s:
            row = s.get(JobRow, job)
            attempt = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job)).one()
            for task in attempt.tasks:  # ended, as reconcile records them in one pass
                if task.index in ended:
                    task.state = "FAILED"
            last = next(t for t in attempt.tasks if t.index == 1)
            lost_worker(s, row, attempt, last, world.controller.spec_of(row), world.controller.clock)
            s.flush()
            recorded = [e.message for e in s.scalars(select(JobEventRow).where(JobEventRow.job_id == job))]
            assert not [m for m in recorded if m.startswith(("grows", "shrinks"))], (ended, recorded)
            assert not any(t.restart for t in attempt.tasks)
            s.rollback()  # the test's made-up ends: the job then stops as usual
    world.stop(job)
    world.drive(job, ("STOPPED",))


def test_a_worker_beyond_the_minimum_lost_on_its_own_shrinks_the_job_the_others_restart(make_world) -> None:
    world = make_world(gpus=2)
    job = world.submit(elastic(1, 2, "if [ $TRAINYARD_TASK_INDEX = 1 ]; then sleep 1; exit 3; fi; sleep 600"))
    world.drive(job, ("RUNNING",))
    resized(world, job)  # it shrank when worker/1 failed
    assert world.events(job)[-1][1].startswith("shrinks from 2 to 1 worker(s): worker worker/1 ended on its own")
    world.drive(job, None, until=lambda _: any(t.index == 0 and t.resizes == 1 and t.state == "RUNNING"
                                               for t in world.tasks(job)), what="worker/0 restarted")
    for _ in range(5):  # nor is it grown again in this attempt, though a GPU is idle
        world.cycle()
    assert world.job(job).state == "RUNNING" and world.job(job).attempt == 0
    assert sum(kind == "resized" for kind, _ in world.events(job)) == 1


def test_a_worker_that_ended_before_its_restart_stop_was_sent_keeps_its_outcome(make_world, tmp_path: Path) -> None:
    world = make_world(gpus=2)
    done, starts = tmp_path / "done", tmp_path / "starts"
    command = f"echo $TRAINYARD_TASK_INDEX >> {starts}; while [ ! -f {done} ]; do sleep 0.05; done"
    job, hog = started_beside_a_hog(world, elastic(1, 2, command), 1)
    world.stop(hog)
    # Reconcile only (no scheduling cycle yet, so nothing has grown it) until the hog is gone.
    wait_until(lambda: world.controller.reconciler.run() or world.job(hog).state == "STOPPED", what="the hog")
    wait_until(lambda: world.controller.reconciler.run() or world.job(hog).state == "STOPPED"
               and not world.controller.reconciler.run(), what="the hog stopped")
    # The grow is decided (worker/0 told to restart), but before the stop is sent the training
    # ends on its own: its exit stands, and it is not run again.
    world.controller.wake()
    assert world.controller._schedule()
    first = next(t for t in world.job(job).attempts[0].tasks if t.index == 0)
    key = TaskKey(job, 0, "worker", 0, first.run)
    done.write_text("")
    wait_until(lambda: not world.backend.observe([key])[key].running, what="worker/0 to end on its own")
    world.drive(job, ("SUCCEEDED", "FAILED", "STOPPED"))
    assert starts.read_text().split().count("0") == 1, world.explain(job)


def test_a_job_whose_minimums_worker_finished_runs_until_its_grown_worker_finishes_too(make_world,
                                                                                      tmp_path: Path) -> None:
    """A new user's trial: the job ended SUCCEEDED as worker/0 (its minimum) finished, and the
    grown worker/1, still at work, was stopped (SIGTERM) without finishing."""
    world = make_world(gpus=2)
    command = f"while [ ! -f {tmp_path}/go$TRAINYARD_TASK_INDEX ]; do sleep 0.05; done; echo finished"
    job = world.submit(elastic(1, 2, command))
    world.drive(job, None, until=lambda _: sum(t.state == "RUNNING" for t in world.tasks(job)) == 2,
                what="two workers to run")
    (tmp_path / "go0").write_text("")
    world.drive(job, None, until=lambda _: any(t.index == 0 and t.state == "SUCCEEDED" for t in world.tasks(job)),
                what="worker/0 to finish")
    for _ in range(3):
        world.cycle()
    assert world.job(job).state == "RUNNING", world.explain(job)
    (tmp_path / "go1").write_text("")
    assert world.drive(job, ("SUCCEEDED", "FAILED", "STOPPED")).state == "SUCCEEDED"
    assert {t.index: t.state for t in world.tasks(job)} == {0: "SUCCEEDED", 1: "SUCCEEDED"}, world.explain(job)
