"""The controller removes a job's directory once the job has ended and the retention has passed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from e2e.server import wait_until
from worlds import World

from trainyard.controller.jobdirs import SWEEP_INTERVAL_SECONDS
from trainyard.core.clock import FakeClock
from trainyard.store.queries import jobs as job_queries

RETENTION = 3600.0


def world_of(make_world, **options) -> World:
    return make_world(gpus=2, cpu_milli=4000, memory_mb=4096, clock=FakeClock(datetime.now(UTC)), **options)


@pytest.fixture
def swept(make_world) -> World:
    return world_of(make_world, job_dir_retention_seconds=RETENTION)


def test_an_ended_job_s_directory_goes_after_the_retention_a_running_one_s_stays(swept: World) -> None:
    backend, controller, clock = swept.backend, swept.controller, swept.clock
    done = swept.submit("name: done\ntaskRoles:\n  m:\n    commands: ['echo 5 > \"$TRAINYARD_JOB_DIR/ckpt\"']\n")
    swept.drive(done)
    running = swept.submit("name: long\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n")
    swept.drive(running, states=("RUNNING",))
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


def test_sweeps_start_at_most_once_per_interval(swept: World) -> None:
    controller, clock = swept.controller, swept.clock
    sweeper = controller.job_dirs
    assert sweeper is not None
    controller.run_once()  # the first cycle (in the fixture) started one already
    sweeper.join()
    assert not sweeper.start_if_due()
    clock.advance(SWEEP_INTERVAL_SECONDS)
    assert sweeper.start_if_due()
    sweeper.join()


def test_a_running_job_whose_directory_passes_the_cap_is_stopped_saying_so(make_world) -> None:
    """``job_dir_max_mb`` (issue 27, finding 7): a job writing past the admin's cap into its
    directory is stopped, its message naming the size and the cap; the directory is kept."""
    world = world_of(make_world, job_dir_max_bytes=1 << 20)
    backend = world.backend
    small = world.submit("name: small\ntaskRoles:\n  m:\n    commands: ['echo 1 > \"$TRAINYARD_JOB_DIR/a\"; "
                         "sleep 600']\n")
    big = world.submit("name: big\ntaskRoles:\n  m:\n    commands: ['head -c 3000000 /dev/urandom > "
                       "\"$TRAINYARD_JOB_DIR/big\"; sleep 600']\n")
    for job in (small, big):
        world.drive(job, states=("RUNNING",))
    cap = world.controller.job_dir_cap
    assert cap is not None
    # All of it written (its blocks, as the cap counts them): 2.86 MiB, "3 MB" in the message.
    wait_until(lambda: (usage := backend.job_dir_usage(big)) is not None and usage.bytes >= 3_000_000,
               what="the big job's directory to fill")
    assert cap.check() == [big]
    world.drive(big, states=("STOPPED",))
    with world.db.session() as s:
        row = job_queries.job_by_id(s, big, full=True)
        assert row is not None
        why = row.stop_reason or ""
    assert why == "its job directory holds 3 MB, over the cluster's cap of 1 MB (job_dir_max_mb)", why
    assert (backend.job_dir(big) / "big").exists()  # kept, for its owner
    assert cap.check() == []  # the small one runs on
