"""The accounting maths on known facts: runs clipped to a period, running tasks counted up
to now, efficiency over measured time only, attempts and groups. How monitoring rows add up
(the database's part) is in ``tests/store/test_usage_queries.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trainyard.monitor.accounting import (
    NO_GROUP,
    Period,
    TaskRun,
    UsageBy,
    allocated,
    run_usages,
    total,
    usage_by,
)
from trainyard.store.queries.usage import MeasuredRow

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(hours: float, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, seconds=seconds)


def run(start: float, end: float | None, *, job: int = 1, user: str = "alice", vc: str = "default",
        gpu_milli: int = 1000, cpu_milli: int = 1000, memory_mb: int = 1024, attempt: int = 0) -> TaskRun:
    return TaskRun(job_id=job, job_name="j", user=user, vc=vc, attempt=attempt, role="m", index=0,
                   gpu_milli=gpu_milli, cpu_milli=cpu_milli, memory_mb=memory_mb, started_at=at(start),
                   finished_at=None if end is None else at(end))


def measured_row(job: int, *, attempt: int = 0, gpu_used: float = 0, gpu_measured: float = 0, cpu_used: float = 0,
                 cpu_measured: float = 0) -> MeasuredRow:
    """What the database summed of a task's monitoring rows, in seconds."""
    return MeasuredRow(job, attempt, "m", 0, gpu_used, gpu_measured, cpu_used, cpu_measured)


PERIOD = Period(since=at(2), until=at(6), now=at(10))


@pytest.mark.parametrize(
    ("start", "end", "hours"),
    [
        (0, 10, 4.0),  # spans the whole period: clipped at both ends
        (3, 4, 1.0),  # inside
        (1, 3, 1.0),  # began before: clipped at since
        (5, 8, 1.0),  # ended after: clipped at until
        (0, 2, 0.0),  # ended exactly at since: [since, until) holds none of it
        (6, 9, 0.0),  # began exactly at until
        (5, None, 1.0),  # still running: up to until, which is before now
    ],
)
def test_a_run_counts_only_the_part_of_it_inside_the_period(start: float, end: float | None, hours: float) -> None:
    usage = allocated(run(start, end, gpu_milli=2500, cpu_milli=4000, memory_mb=8192), PERIOD)
    assert usage.gpu_hours == pytest.approx(2.5 * hours)
    assert usage.cpu_hours == pytest.approx(4 * hours)
    assert usage.memory_gib_hours == pytest.approx(8 * hours)
    assert usage.jobs == ({1} if hours else set())


def test_a_running_task_counts_up_to_now_when_the_period_reaches_past_it() -> None:
    period = Period(since=at(2), until=at(100), now=at(7))
    assert allocated(run(5, None), period).gpu_hours == pytest.approx(2.0)


def test_efficiency_is_over_measured_time_only_and_is_none_when_nothing_was_measured() -> None:
    runs = [run(0, 10, job=1, gpu_milli=2000, cpu_milli=4000), run(0, 10, job=2), run(0, 10, job=3)]
    facts = [measured_row(1, gpu_used=3600, gpu_measured=2 * 3600, cpu_used=2 * 3600, cpu_measured=3600),
             measured_row(2, cpu_used=1800, cpu_measured=3600)]  # simulated GPU: no utilisation
    lines = usage_by(run_usages(runs, facts, PERIOD), UsageBy.JOB, {})
    assert lines["1"].gpu_hours == pytest.approx(8.0) and lines["1"].gpu_efficiency == pytest.approx(0.5)
    assert lines["1"].cpu_efficiency == pytest.approx(0.5)  # 2 cores busy of 4
    assert lines["2"].gpu_efficiency is None and lines["2"].cpu_efficiency == pytest.approx(0.5)
    assert lines["3"].gpu_efficiency is None and lines["3"].cpu_efficiency is None


def test_a_preempted_jobs_attempts_add_up_and_measurements_go_to_their_own_attempt() -> None:
    runs = [run(1, 3, attempt=0), run(4, 5, attempt=1)]
    facts = [measured_row(1, attempt=0, gpu_used=3600, gpu_measured=3600),
             measured_row(1, attempt=1, gpu_used=0, gpu_measured=3600)]
    line = usage_by(run_usages(runs, facts, PERIOD), UsageBy.USER, {})["alice"]
    assert line.jobs == {1} and line.gpu_hours == pytest.approx(2.0)
    assert line.gpu_efficiency == pytest.approx(0.5)


def test_a_user_in_two_groups_counts_in_both_and_once_in_the_total() -> None:
    usages = run_usages([run(0, 10, user="alice", job=1), run(0, 10, user="carol", job=2)], [], PERIOD)
    lines = usage_by(usages, UsageBy.GROUP, {"alice": ["cv", "nlp"]})
    assert {name: u.gpu_hours for name, u in lines.items()} == {"cv": 4.0, "nlp": 4.0, NO_GROUP: 4.0}
    assert total(usages).gpu_hours == pytest.approx(8.0) and total(usages).jobs == {1, 2}
