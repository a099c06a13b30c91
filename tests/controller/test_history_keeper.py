"""The controller keeps the monitoring history bounded: once a minute (on an injected clock)
it averages complete buckets and prunes old rows, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from trainyard.controller.history import CLOSE_DAYS_PER_RUN, MAINTAIN_INTERVAL_SECONDS, HistoryKeeper
from trainyard.core.clock import FakeClock
from trainyard.core.retention import parse_retention
from trainyard.store.rows import TaskSampleRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def add_raw(db, start: datetime, seconds: int) -> None:
    with db.session() as session:
        session.add_all(TaskSampleRow(job_id=1, attempt=0, role="m", index=0, node="n", at=start + timedelta(seconds=s),
                                      step=0, cpu_cores=1.0, gpus_held=0.0) for s in range(0, seconds, 10))


def count(db, step: int) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).where(TaskSampleRow.step == step)) or 0)


def test_the_history_is_maintained_once_per_interval(db) -> None:
    clock = FakeClock(T0 + timedelta(minutes=3))
    add_raw(db, T0, 180)
    keeper = HistoryKeeper(db, clock)
    assert keeper.start_if_due()
    keeper.join()
    assert keeper.last is not None and keeper.last.written[60] == 2  # 00:02-00:03 ended less than SETTLE ago
    add_raw(db, T0 + timedelta(minutes=3), 120)
    clock.advance(MAINTAIN_INTERVAL_SECONDS - 1)
    assert not keeper.start_if_due()
    clock.advance(1)
    assert keeper.start_if_due()
    keeper.join()
    assert count(db, 60) == 3


def test_the_controllers_cycle_downsamples_and_prunes_by_its_retention(db, make_world) -> None:
    clock = FakeClock(T0 + timedelta(hours=3))
    add_raw(db, T0, 3 * 3600)
    world = make_world(gpus=1, cpu_milli=1000, memory_mb=1024, clock=clock, users=(),
                       monitor_retention=parse_retention("raw:1h,1m:2h,10m:1d"))  # its first cycle has run
    controller = world.controller
    controller.history.join()
    assert count(db, 0) == 360  # the last hour of raw samples
    assert count(db, 60) == 119  # 01:00..02:58: the minute that ends at 3 h is not settled yet
    assert count(db, 600) == 17  # 2 h 50 min: the bucket that ends at 3 h is not settled yet


def test_each_run_closes_the_days_complete_by_then_once(db) -> None:
    add_raw(db, T0 - timedelta(hours=1), 70 * 60)  # 23:00 to 00:10
    clock = FakeClock(T0 + timedelta(minutes=4))
    keeper = HistoryKeeper(db, clock, monitor_interval_seconds=10)
    keeper.maintain()
    assert keeper.last_closed == []  # the day before ended less than 5 minutes ago
    clock.advance(MAINTAIN_INTERVAL_SECONDS)
    keeper.maintain()
    assert keeper.last_closed == [(T0 - timedelta(days=1)).date()]
    clock.advance(MAINTAIN_INTERVAL_SECONDS)
    keeper.maintain()
    assert keeper.last_closed == []


def test_a_backlog_of_days_closes_a_few_days_a_run_oldest_first(db) -> None:
    add_raw(db, T0 - timedelta(days=6), 60)
    keeper = HistoryKeeper(db, FakeClock(T0 + timedelta(minutes=10)), monitor_interval_seconds=10)
    days = [(T0 - timedelta(days=n)).date() for n in range(6, 0, -1)]
    keeper.maintain()
    assert keeper.last_closed == days[:CLOSE_DAYS_PER_RUN]
    keeper.maintain()
    assert keeper.last_closed == days[CLOSE_DAYS_PER_RUN:]
