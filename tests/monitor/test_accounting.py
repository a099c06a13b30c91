"""The accounting maths on known facts: runs clipped to a period, running tasks counted up
to now, spans of raw and downsampled monitoring rows, efficiency over measured time only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trainyard.monitor.accounting import (
    NO_GROUP,
    Period,
    TaskRun,
    UsageBy,
    UsageSample,
    allocated,
    measured,
    run_usages,
    total,
    usage_by,
)

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def at(hours: float, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, seconds=seconds)


def run(start: float, end: float | None, *, job: int = 1, user: str = "alice", vc: str = "default",
        gpu_milli: int = 1000, cpu_milli: int = 1000, memory_mb: int = 1024, attempt: int = 0) -> TaskRun:
    return TaskRun(job_id=job, job_name="j", user=user, vc=vc, attempt=attempt, role="m", index=0,
                   gpu_milli=gpu_milli, cpu_milli=cpu_milli, memory_mb=memory_mb, started_at=at(start),
                   finished_at=None if end is None else at(end))


def sample(when: datetime, *, step: int = 0, util: float | None = None, cores: float | None = None,
           held: float = 1.0, job: int = 1, attempt: int = 0) -> UsageSample:
    return UsageSample(job_id=job, attempt=attempt, role="m", index=0, at=when, step=step, gpus_held=held,
                       gpu_util_pct=util, cpu_cores=cores)


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


def test_a_raw_row_stands_until_the_next_row_and_no_longer_than_its_span() -> None:
    rows = [sample(at(3), util=100), sample(at(3, 10), util=50), sample(at(3, 20), util=100),
            sample(at(4), util=0)]  # an hour nobody measured (the server was down), then one more row
    usage = measured(run(0, 10), rows, PERIOD, raw_span=15)
    assert usage.gpu_hours_measured == pytest.approx((10 + 10 + 15 + 15) / 3600)
    assert usage.gpu_hours_used == pytest.approx((10 + 5 + 15 + 0) / 3600)


def test_a_downsampled_row_covers_its_step_cut_where_the_next_row_begins_and_clipped_to_period_and_run() -> None:
    rows = [
        sample(at(1.5), step=3600, util=40),  # [1.5, 2.5): half of it inside the period
        sample(at(2.5), step=3600, util=60),  # [2.5, 3.5), but a raw row starts at 3.0: cut there
        sample(at(3), util=100),  # raw, last: 15 s
        sample(at(5.5), step=3600, util=80),  # [5.5, 6.5): the run ended at 5.75
    ]
    usage = measured(run(0, 5.75, gpu_milli=2000), [*rows[:3], rows[3]], PERIOD, raw_span=15)
    assert usage.gpu_hours_measured == pytest.approx(0.5 + 0.5 + 15 / 3600 + 0.25)
    assert usage.gpu_hours_used == pytest.approx(0.4 * 0.5 + 0.6 * 0.5 + 15 / 3600 + 0.8 * 0.25)


def test_efficiency_is_over_measured_time_only_and_is_none_when_nothing_was_measured() -> None:
    runs = [run(0, 10, job=1, gpu_milli=2000, cpu_milli=4000), run(0, 10, job=2), run(0, 10, job=3)]
    rows = [sample(at(2), step=3600, util=50, cores=2, held=2, job=1),  # one hour of job 1's four
            sample(at(2), step=3600, util=None, cores=0.5, job=2)]  # simulated GPU: no utilisation
    lines = usage_by(run_usages(runs, rows, PERIOD, raw_span=15), UsageBy.JOB, {})
    assert lines["1"].gpu_hours == pytest.approx(8.0) and lines["1"].gpu_efficiency == pytest.approx(0.5)
    assert lines["1"].cpu_efficiency == pytest.approx(0.5)  # 2 cores busy of 4
    assert lines["2"].gpu_efficiency is None and lines["2"].cpu_efficiency == pytest.approx(0.5)
    assert lines["3"].gpu_efficiency is None and lines["3"].cpu_efficiency is None


def test_a_preempted_jobs_attempts_add_up_and_samples_go_to_their_own_attempt() -> None:
    runs = [run(1, 3, attempt=0), run(4, 5, attempt=1)]
    rows = [sample(at(2), step=3600, util=100, attempt=0), sample(at(4), step=3600, util=0, attempt=1)]
    line = usage_by(run_usages(runs, rows, PERIOD, raw_span=15), UsageBy.USER, {})["alice"]
    assert line.jobs == {1} and line.gpu_hours == pytest.approx(2.0)
    assert line.gpu_efficiency == pytest.approx(0.5)


def test_a_user_in_two_groups_counts_in_both_and_once_in_the_total() -> None:
    usages = run_usages([run(0, 10, user="alice", job=1), run(0, 10, user="carol", job=2)], [], PERIOD, raw_span=15)
    lines = usage_by(usages, UsageBy.GROUP, {"alice": ["cv", "nlp"]})
    assert {name: u.gpu_hours for name, u in lines.items()} == {"cv": 4.0, "nlp": 4.0, NO_GROUP: 4.0}
    assert total(usages).gpu_hours == pytest.approx(8.0) and total(usages).jobs == {1, 2}
