"""What monitoring rows add up to, summed in the database (SQLite, and PostgreSQL when
configured): the span each raw or downsampled row stands for, cut at the next row, clipped
to the period, to now and to the task's run."""

from __future__ import annotations

import pytest
from services.usage_world import Run, add_job, add_sample, at

from trainyard.core.clock import FakeClock
from trainyard.services import auth
from trainyard.store.db import Database
from trainyard.store.queries.usage import MeasuredRow, measured_use

RAW_SPAN = 15.0


def measure(db: Database, job: int, since: float = 2, until: float = 6, now: float = 10) -> MeasuredRow:
    with db.session() as s:
        [row] = measured_use(s, [job], since=at(since), until=at(until), now=at(now), raw_span_seconds=RAW_SPAN,
                             reach_seconds=24 * 3600)
    return row


def a_job(db: Database, run: Run) -> int:
    with db.session() as s:
        user = auth.create_user(s, "alice", is_admin=False, clock=FakeClock(at(-1)))
        return add_job(s, user, [[run]])


def test_a_raw_row_stands_until_the_next_row_and_no_longer_than_the_raw_span(db: Database) -> None:
    job = a_job(db, Run(at(0), at(10)))
    with db.session() as s:
        for when, util in ((at(3), 100.0), (at(3, 10), 50.0), (at(3, 20), 100.0), (at(4), 0.0)):
            add_sample(s, job, when, gpu_util_pct=util, cpu_cores=0.5)  # an hour nobody measured before the last
    row = measure(db, job)
    assert row.gpu_seconds_measured == pytest.approx(10 + 10 + 15 + 15)
    assert row.gpu_seconds_used == pytest.approx(10 + 5 + 15 + 0)
    assert (row.cpu_seconds_measured, row.cpu_core_seconds_used) == (pytest.approx(50), pytest.approx(25))


def test_a_downsampled_row_covers_its_step_cut_at_the_next_row_and_clipped_to_period_and_run(db: Database) -> None:
    job = a_job(db, Run(at(0), at(5.75)))
    with db.session() as s:
        add_sample(s, job, at(1.5), step=3600, gpus_held=2, gpu_util_pct=40.0)  # [1.5, 2.5): half in the period
        add_sample(s, job, at(2.5), step=3600, gpus_held=2, gpu_util_pct=60.0)  # cut at 3.0 by the raw row
        add_sample(s, job, at(3), gpus_held=2, gpu_util_pct=100.0)  # raw: 15 s
        add_sample(s, job, at(5.5), step=3600, gpus_held=2, gpu_util_pct=80.0)  # the run ended at 5.75
        add_sample(s, job, at(0.5), step=3600, gpus_held=2, gpu_util_pct=100.0)  # ends before the period
    row = measure(db, job)
    assert row.gpu_seconds_measured == pytest.approx(2 * (1800 + 1800 + 15 + 900))
    assert row.gpu_seconds_used == pytest.approx(2 * (0.4 * 1800 + 0.6 * 1800 + 15 + 0.8 * 900))


def test_a_running_tasks_rows_count_up_to_now_and_a_simulated_gpu_measures_nothing(db: Database) -> None:
    job = a_job(db, Run(at(4), None))
    with db.session() as s:
        add_sample(s, job, at(4), step=3600, gpu_util_pct=None, cpu_cores=1.0)
        add_sample(s, job, at(5), step=3600, gpu_util_pct=None, cpu_cores=1.0)
    row = measure(db, job, until=8, now=5.5)
    assert (row.gpu_seconds_measured, row.gpu_seconds_used) == (0, 0)
    assert row.cpu_seconds_measured == pytest.approx(1.5 * 3600)


def test_of_rows_taken_at_the_same_moment_the_finest_counts_so_a_period_summed_in_pieces_gives_the_whole(
    db: Database,
) -> None:
    job = a_job(db, Run(at(0), at(10)))
    with db.session() as s:
        add_sample(s, job, at(3), step=600, gpu_util_pct=10.0)  # the bucket [3:00, 3:10) ...
        for minute in range(10):  # ... and its minutes, the first taken at the same moment
            add_sample(s, job, at(3, 60 * minute), step=60, gpu_util_pct=50.0)
        add_sample(s, job, at(3, 120), gpu_util_pct=90.0)  # a raw row where the third minute starts
    whole = measure(db, job, since=2, until=4)
    # The 10-minute row counts nowhere, nor the third minute's row: the raw row does, for its
    # 15 s, and the rest of that minute nobody measured.
    assert whole.gpu_seconds_measured == pytest.approx(540 + 15)
    assert whole.gpu_seconds_used == pytest.approx(0.5 * 540 + 0.9 * 15)
    pieces = [measure(db, job, since=a, until=b) for a, b in ((2, 3 + 1 / 120), (3 + 1 / 120, 3.05), (3.05, 4))]
    assert sum(p.gpu_seconds_measured for p in pieces) == pytest.approx(whole.gpu_seconds_measured)
    assert sum(p.gpu_seconds_used for p in pieces) == pytest.approx(whole.gpu_seconds_used)
