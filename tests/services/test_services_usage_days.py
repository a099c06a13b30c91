"""Daily usage totals (``services/usage_days.py``) on a real store (SQLite, and PostgreSQL
when configured): a report that reads the closed days gives what the monitoring rows alone
give, over periods with partial edge days, after the history keeper ran twice, and across a
crash and a restart half-way through closing; days close only once complete, and their
totals outlive the history."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from services.usage_world import Run, add_job, at
from sqlalchemy import func, insert, select

from trainyard.controller.history import HistoryKeeper
from trainyard.core.clock import FakeClock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS
from trainyard.schemas.usage import UsageReport
from trainyard.services import auth, usage_days
from trainyard.services import usage as usage_service
from trainyard.store.db import Database
from trainyard.store.rows import TaskSampleRow, TaskUsageDayRow, UsageDayRow, UserRow

INTERVAL = 10.0  # seconds between raw samples
NOW = at(3 * 24 + 12)  # day 3, noon: days 0, 1 and 2 may close
STEPS = [t.step for t in DEFAULT_RETENTION_TIERS]


def history(job: int, attempt: int, role: str, index: int, start: datetime, end: datetime | None,
            rng: random.Random, *, gpu: bool = True) -> list[dict[str, object]]:
    """What the default retention holds of one task at NOW: 10-minute rows for all its run,
    minute rows for the last day, raw rows (a little late, now and then missing) for the last
    hour; a 40-minute stop of the server on the first day."""
    stop = min(end or NOW, NOW)
    rows = []

    def row(when: datetime, step: int) -> None:
        if start <= when < stop and not at(20) <= when < at(20, 2400):
            rows.append({"job_id": job, "attempt": attempt, "role": role, "index": index, "node": "n1", "at": when,
                         "step": step, "gpus_held": 2.0 if gpu else 0.0,
                         "gpu_util_pct": rng.uniform(0, 100) if gpu else None, "cpu_cores": rng.uniform(0, 4)})

    for step, keep in ((600, None), (60, timedelta(days=1))):
        first = max(start, NOW - keep) if keep else start
        when = datetime.fromtimestamp(first.timestamp() - first.timestamp() % step, first.tzinfo)
        while when < stop:
            if when + timedelta(seconds=step) <= NOW - timedelta(seconds=30):  # averaged once settled
                row(when, step)
            when += timedelta(seconds=step)
    when = NOW - timedelta(hours=1)
    while when < stop:
        if rng.random() > 0.05:
            row(when, 0)
        when += timedelta(seconds=INTERVAL * rng.uniform(0.9, 1.3))
    return rows


@pytest.fixture
def jobs(db: Database) -> dict[str, int]:
    """alice's job runs from day 0 on; bob's was preempted on day 1, and its second attempt
    (two tasks) ended on day 2; carol's ran an hour on day 1 on a simulated GPU."""
    rng = random.Random(14)
    with db.session() as s:
        users = {n: auth.create_user(s, n, is_admin=n == "root", clock=FakeClock(at(-1)))
                 for n in ("root", "alice", "bob", "carol")}
        a = add_job(s, users["alice"], [[Run(at(2), None, gpus=[[0, 1000], [1, 1000]], cpu_milli=4000)]])
        second = [Run(at(28), at(68.5), role="w", index=0), Run(at(28), at(68.5), role="w", index=1)]
        b = add_job(s, users["bob"], [[Run(at(10), at(27))], second])
        c = add_job(s, users["carol"], [[Run(at(36), at(37))]])
        samples = (history(a, 0, "m", 0, at(2), None, rng) + history(b, 0, "m", 0, at(10), at(27), rng)
                   + history(b, 1, "w", 0, at(28), at(68.5), rng) + history(b, 1, "w", 1, at(28), at(68.5), rng)
                   + history(c, 0, "m", 0, at(36), at(37), rng, gpu=False))
        s.execute(insert(TaskSampleRow), samples)
    return {"A": a, "B": b, "C": c}


PERIODS = [
    (at(5.5), at(65)),  # partial days at both ends
    (at(24), at(72)),  # whole days only
    (at(24, -30), at(24, 30)),  # a minute across midnight
    (at(0), None),  # up to now, today not closed
    (at(30), at(100)),  # past now
    (at(-48), at(80)),  # from before anything ran
]


def report(db: Database, since: datetime, until: datetime | None, by: str = "job") -> UsageReport:
    with db.session() as s:
        root = s.scalars(select(UserRow).where(UserRow.name == "root")).one()
        period = usage_service.period_of(since, until, NOW)
        return usage_service.usage_report(s, root, by=by, period=period,  # type: ignore[arg-type]
                                          monitor_interval_seconds=INTERVAL)


def reports(db: Database) -> list[UsageReport]:
    return [report(db, since, until, by) for since, until in PERIODS for by in ("job", "user")]


def same(got: list[UsageReport], expected: list[UsageReport]) -> None:
    """The same lines with the same figures (to the last few bits: sums added in another order)."""
    for mine, theirs in zip(got, expected, strict=True):
        for line, other in zip([*mine.lines, mine.total], [*theirs.lines, theirs.total], strict=True):
            for name, value in line.model_dump().items():
                expect = other.model_dump()[name]
                assert value == (pytest.approx(expect, rel=1e-9, abs=1e-9) if isinstance(expect, float) else expect), (
                    mine.since, mine.until, line.name, name)


def keeper(db: Database, now: datetime = NOW) -> HistoryKeeper:
    return HistoryKeeper(db, FakeClock(now), monitor_interval_seconds=INTERVAL)


def closed(db: Database) -> list[str]:
    with db.session() as s:
        return [d.isoformat() for d in s.scalars(select(UsageDayRow.day).order_by(UsageDayRow.day))]


def totals(db: Database) -> int:
    with db.session() as s:
        return int(s.scalar(select(func.count()).select_from(TaskUsageDayRow)) or 0)


def test_a_report_over_closed_days_gives_what_the_rows_alone_give(db: Database, jobs: dict[str, int]) -> None:
    from_rows = reports(db)
    assert from_rows[0].total.gpuHoursUsed and from_rows[0].total.cpuEfficiency  # something was measured
    assert keeper(db).close_days(NOW) == [at(24 * d).date() for d in range(3)]
    assert closed(db) == ["2026-11-01", "2026-11-02", "2026-11-03"]
    # Day 0: alice's task, bob's first; day 1: those, bob's second attempt's two, carol's; day 2:
    # alice's and bob's two.
    assert totals(db) == 2 + 5 + 3
    same(reports(db), from_rows)


def test_the_keeper_running_twice_counts_no_day_twice(db: Database, jobs: dict[str, int]) -> None:
    from_rows = reports(db)
    history_keeper = keeper(db)
    history_keeper.close_days(NOW)
    count = totals(db)
    assert history_keeper.close_days(NOW) == [] and history_keeper.close_days(NOW + timedelta(hours=1)) == []
    assert totals(db) == count
    same(reports(db), from_rows)


def test_a_crash_and_a_restart_half_way_lose_and_double_no_day(
    db: Database, database_url: str, jobs: dict[str, int]
) -> None:
    from_rows = reports(db)
    with db.session() as s:
        days = usage_days.days_to_close(s, NOW, INTERVAL, STEPS)
    with db.session() as s:
        usage_days.close_day(s, days[0], NOW, INTERVAL)
    with pytest.raises(RuntimeError), db.session() as s:  # the server dies before the commit
        usage_days.close_day(s, days[1], NOW, INTERVAL)
        raise RuntimeError("killed")
    assert closed(db) == ["2026-11-01"]
    db.dispose()
    again = Database(database_url)  # `yard up` again: a new engine on the same store
    try:
        assert keeper(again).close_days(NOW) == days[1:]
        assert closed(again) == ["2026-11-01", "2026-11-02", "2026-11-03"] and totals(again) == 10
        same(reports(again), from_rows)
    finally:
        again.dispose()


def test_a_day_closes_only_a_few_intervals_after_its_end(db: Database, jobs: dict[str, int]) -> None:
    with db.session() as s:
        assert usage_days.days_to_close(s, at(24, 299), INTERVAL, STEPS) == []
        assert usage_days.days_to_close(s, at(24, 300), INTERVAL, STEPS) == [at(0).date()]  # 5 minutes
        assert usage_days.days_to_close(s, at(48, 300), 600, STEPS) == [at(0).date()]  # 3 intervals of 10 minutes
        assert usage_days.days_to_close(s, at(48, 1800), 600, STEPS) == [at(0).date(), at(24).date()]


def test_the_daily_totals_outlive_the_history_until_their_own_keep(db: Database, jobs: dict[str, int]) -> None:
    whole_days = [report(db, at(0), at(72), by) for by in ("job", "user")]
    keeper(db).close_days(NOW)
    with db.session() as s:  # the history is pruned after 30 days; the totals stay
        s.execute(TaskSampleRow.__table__.delete())
    same([report(db, at(0), at(72), by) for by in ("job", "user")], whole_days)
    history_keeper = HistoryKeeper(db, FakeClock(NOW), monitor_interval_seconds=INTERVAL, usage_days_keep_days=3)
    assert history_keeper.close_days(at(24 * 4 + 12)) == [at(72).date()]  # nobody measured: closed empty
    assert closed(db) == ["2026-11-02", "2026-11-03", "2026-11-04"] and totals(db) == 8  # day 0 past its keep
