"""The controller removes a job's directory once the job has ended and the retention has passed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from e2e.server import kill_tasks_under, wait_until
from test_controller import drive, submit

from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.jobdirs import SWEEP_INTERVAL_SECONDS
from trainyard.controller.loop import Controller
from trainyard.core.clock import FakeClock
from trainyard.services import auth
from trainyard.store.queries import jobs as job_queries

RETENTION = 3600.0


@pytest.fixture
def swept(db, tmp_path):
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(2), cpu_milli=4000, memory_mb=4096)
    clock = FakeClock(datetime.now(UTC))
    controller = Controller(db, backend, clock, job_dir_retention_seconds=RETENTION)
    with db.session() as s:
        user = auth.create_user(s, "alice", is_admin=False, clock=clock)
    controller.run_once()
    yield backend, controller, clock, user
    kill_tasks_under(tmp_path)


def test_an_ended_job_s_directory_goes_after_the_retention_a_running_one_s_stays(db, swept) -> None:
    backend, controller, clock, user = swept
    done = submit(db, user, "name: done\ntaskRoles:\n  m:\n    commands: ['echo 5 > \"$TRAINYARD_JOB_DIR/ckpt\"']\n")
    drive(controller, db, done)
    running = submit(db, user, "name: long\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n")
    drive(controller, db, running, states=("RUNNING",))
    backend.job_dir(999).mkdir(parents=True)  # a job this store does not know: not ours to remove
    assert backend.job_dir_ids() == [done, running, 999]
    assert controller.job_dirs is not None

    clock.advance(RETENTION - 1)
    assert controller.job_dirs.sweep() == []
    assert (backend.job_dir(done) / "ckpt").read_text() == "5\n"

    clock.advance(2)
    controller.run_once()  # the controller's own cycle starts a sweep, in the background
    controller.job_dirs.join()
    assert backend.job_dir_ids() == [running, 999]
    clock.advance(RETENTION * 10)  # however long a job runs, its directory stays
    assert controller.job_dirs.sweep() == []
    assert backend.job_dir_ids() == [running, 999]


def test_sweeps_start_at_most_once_per_interval(db, swept) -> None:
    _, controller, clock, _ = swept
    sweeper = controller.job_dirs
    assert sweeper is not None
    controller.run_once()  # the first cycle (in the fixture) started one already
    sweeper.join()
    assert not sweeper.start_if_due()
    clock.advance(SWEEP_INTERVAL_SECONDS)
    assert sweeper.start_if_due()
    sweeper.join()


def test_a_running_job_whose_directory_passes_the_cap_is_stopped_saying_so(db, tmp_path) -> None:
    """``job_dir_max_mb`` (issue 27, finding 7): a job writing past the admin's cap into its
    directory is stopped, its message naming the size and the cap; the directory is kept."""
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(2), cpu_milli=4000, memory_mb=4096)
    clock = FakeClock(datetime.now(UTC))
    controller = Controller(db, backend, clock, job_dir_max_bytes=1 << 20)
    try:
        with db.session() as s:
            user = auth.create_user(s, "alice", is_admin=False, clock=clock)
        controller.run_once()  # the node is known
        small = submit(db, user, "name: small\ntaskRoles:\n  m:\n    commands: ['echo 1 > \"$TRAINYARD_JOB_DIR/a\"; "
                                 "sleep 600']\n")
        big = submit(db, user, "name: big\ntaskRoles:\n  m:\n    commands: ['head -c 3000000 /dev/urandom > "
                               "\"$TRAINYARD_JOB_DIR/big\"; sleep 600']\n")
        for job in (small, big):
            drive(controller, db, job, states=("RUNNING",))
        cap = controller.job_dir_cap
        assert cap is not None
        wait_until(lambda: (usage := backend.job_dir_usage(big)) is not None and usage.bytes > 2 << 20,
                   what="the big job's directory to fill")
        assert cap.check() == [big]
        drive(controller, db, big, states=("STOPPED",))
        with db.session() as s:
            row = job_queries.job_by_id(s, big, full=True)
            assert row is not None
            why = row.stop_reason or ""
        assert why == "its job directory holds 3 MB, over the cluster's cap of 1 MB (job_dir_max_mb)", why
        assert (backend.job_dir(big) / "big").exists()  # kept, for its owner
        assert cap.check() == []  # the small one runs on
    finally:
        kill_tasks_under(tmp_path)
