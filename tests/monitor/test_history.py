"""The monitoring history on a real store (SQLite and PostgreSQL): downsampling raw rows
into per-minute and per-10-minute averages, exactly and once; pruning by age; windows
read at the finest resolution that covers them; and each node's and task's newest figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from trainyard.core.metrics import GpuSample, NodeSample, Sampled, TaskSample
from trainyard.core.retention import DEFAULT_MONITOR_RETENTION, parse_retention
from trainyard.core.settings import Settings
from trainyard.monitor.history import MAX_POINTS, SETTLE, Window, maintain, node_history, record, task_history
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.rows import NodeSampleRow, TaskSampleRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # on a 10-minute boundary
TIERS = parse_retention(DEFAULT_MONITOR_RETENTION)  # raw:1h, 1m:1d, 10m:30d


def task_row(at: datetime, *, step: int = 0, cpu: float | None = 1.0, util: float | None = None,
             memory: int | None = 100, job: int = 1, role: str = "worker", index: int = 0) -> TaskSampleRow:
    return TaskSampleRow(job_id=job, attempt=0, role=role, index=index, node="n1", at=at, step=step, cpu_cores=cpu,
                         memory_mb=memory, gpus_held=1.0, gpu_util_pct=util, gpu_memory_mb=None)


def raw_every_10s(db, start: datetime, minutes: int, **fields) -> None:
    """Raw samples every 10 s; the i-th has cpu_cores = i and memory_mb = 10 * i."""
    with db.session() as session:
        session.add_all(task_row(start + timedelta(seconds=10 * i), cpu=float(i), memory=10 * i, **fields)
                        for i in range(6 * minutes))


def rows(db, step: int) -> list[TaskSampleRow]:
    with db.session() as session:
        found = session.scalars(select(TaskSampleRow).where(TaskSampleRow.step == step).order_by(TaskSampleRow.at))
        return [(r.at, r.cpu_cores, r.memory_mb, r.gpu_util_pct) for r in found]


def run(db, now: datetime):
    with db.session() as session:
        return maintain(session, now, TIERS)


def test_raw_samples_average_into_minutes_then_ten_minutes_exactly(db) -> None:
    raw_every_10s(db, T0, 20)
    done = run(db, T0 + timedelta(minutes=20) + SETTLE)
    assert done.written == {60: 20, 600: 2}
    minutes = rows(db, 60)
    # Minute k holds samples 6k..6k+5: cpu mean 6k + 2.5, memory mean 10 * (6k + 2.5) rounded.
    assert minutes[0] == (T0, 2.5, 25, None)
    assert minutes[7] == (T0 + timedelta(minutes=7), 44.5, 445, None)
    assert rows(db, 600) == [(T0, 29.5, 295, None), (T0 + timedelta(minutes=10), 89.5, 895, None)]


def test_running_again_writes_nothing_twice_and_a_bucket_waits_until_complete(db) -> None:
    raw_every_10s(db, T0, 15)
    first = run(db, T0 + timedelta(minutes=15) + SETTLE)
    assert first.written == {60: 15, 600: 1}  # 00:10-00:20 is not over: not written yet
    assert run(db, T0 + timedelta(minutes=15) + SETTLE).written == {60: 0, 600: 0}
    with db.session() as session:  # the rest of the second 10 minutes arrives
        session.add_all(task_row(T0 + timedelta(minutes=15, seconds=10 * i), cpu=float(90 + i), memory=10 * (90 + i))
                        for i in range(30))
    later = run(db, T0 + timedelta(minutes=20) + SETTLE)
    assert later.written == {60: 5, 600: 1}
    assert [m[0] for m in rows(db, 60)] == [T0 + timedelta(minutes=k) for k in range(20)]
    assert rows(db, 600)[1] == (T0 + timedelta(minutes=10), 89.5, 895, None)


def test_a_figure_never_measured_stays_not_available_and_a_partly_measured_one_is_averaged(db) -> None:
    with db.session() as session:
        session.add_all([task_row(T0 + timedelta(seconds=s), util=u, job=7)
                         for s, u in ((0, None), (10, 40.0), (20, None), (30, 80.0))])
        session.add_all([task_row(T0 + timedelta(seconds=s), util=None, job=8) for s in (0, 10)])
        session.add_all([task_row(T0 + timedelta(seconds=s), cpu=None, memory=None, job=9) for s in (0, 10)])
    run(db, T0 + timedelta(minutes=1) + SETTLE)
    with db.session() as session:
        by_job = {r.job_id: r for r in session.scalars(select(TaskSampleRow).where(TaskSampleRow.step == 60))}
    assert by_job[7].gpu_util_pct == 60.0
    assert by_job[8].gpu_util_pct is None  # a simulated GPU: n/a, not 0
    assert (by_job[9].cpu_cores, by_job[9].memory_mb) == (None, None)


def test_each_task_and_node_is_averaged_on_its_own(db) -> None:
    def gpu(util, mem, ecc, healthy=True):
        return {"index": 0, "model": "A100", "memory_total_mb": 40960, "util_pct": util, "memory_used_mb": mem,
                "temperature_c": 60.0, "power_w": 200.0, "ecc_errors": ecc, "simulated": False, "healthy": healthy}

    with db.session() as session:
        session.add_all([task_row(T0, cpu=2.0, role="ps"), task_row(T0 + timedelta(seconds=10), cpu=4.0, role="ps"),
                         task_row(T0, cpu=10.0, index=1), task_row(T0 + timedelta(seconds=30), cpu=20.0, index=1)])
        session.add_all([
            NodeSampleRow(node="n1", at=T0, step=0, cpu_pct=10.0, memory_used_mb=1000, memory_total_mb=4000,
                          gpus=[gpu(20.0, 1000, 0)]),
            NodeSampleRow(node="n1", at=T0 + timedelta(seconds=10), step=0, cpu_pct=30.0, memory_used_mb=2001,
                          memory_total_mb=4000, gpus=[gpu(40.0, 3000, 2, healthy=False)]),
            NodeSampleRow(node="n2", at=T0, step=0, cpu_pct=90.0, gpus=[]),
        ])
    run(db, T0 + timedelta(minutes=1) + SETTLE)
    with db.session() as session:
        tasks = {(r.role, r.index): r.cpu_cores
                 for r in session.scalars(select(TaskSampleRow).where(TaskSampleRow.step == 60))}
        nodes = {r.node: r for r in session.scalars(select(NodeSampleRow).where(NodeSampleRow.step == 60))}
    assert tasks == {("ps", 0): 3.0, ("worker", 1): 15.0}
    assert (nodes["n1"].cpu_pct, nodes["n1"].memory_used_mb, nodes["n1"].memory_total_mb) == (20.0, 1500, 4000)
    [averaged_gpu] = nodes["n1"].gpus
    assert (averaged_gpu["util_pct"], averaged_gpu["memory_used_mb"], averaged_gpu["ecc_errors"]) == (30.0, 2000, 2)
    assert averaged_gpu["healthy"] is False  # it failed once in the minute: say so
    assert nodes["n2"].cpu_pct == 90.0


def test_rows_go_when_their_tier_has_kept_them_long_enough(db) -> None:
    raw_every_10s(db, T0, 20)
    run(db, T0 + timedelta(minutes=20) + SETTLE)
    run(db, T0 + timedelta(minutes=70))  # raw kept 1 h: the first 10 minutes went
    assert rows(db, 0)[0][0] == T0 + timedelta(minutes=10)
    assert len(rows(db, 60)) == 20
    run(db, T0 + timedelta(days=1, minutes=15))
    assert rows(db, 0) == []
    assert [m[0] for m in rows(db, 60)] == [T0 + timedelta(minutes=k) for k in range(15, 20)]
    assert len(rows(db, 600)) == 2
    removed = run(db, T0 + timedelta(days=30, minutes=20)).removed
    assert (rows(db, 60), rows(db, 600), removed) == ([], [], 2 + 5)


def test_rows_of_a_resolution_no_longer_configured_go_after_the_longest_retention(db) -> None:
    with db.session() as session:
        session.add(task_row(T0, step=300))
    run(db, T0 + timedelta(days=29))
    assert len(rows(db, 300)) == 1
    run(db, T0 + timedelta(days=31))
    assert rows(db, 300) == []


def test_a_long_gap_in_the_samples_is_skipped_not_walked(db) -> None:
    raw_every_10s(db, T0, 2)
    raw_every_10s(db, T0 + timedelta(days=3), 2)
    done = run(db, T0 + timedelta(days=3, minutes=2) + SETTLE)
    assert done.written[60] == 4


# --- Windows ---------------------------------------------------------------------------------

def history_of(db, now: datetime, since: datetime, until: datetime | None = None, **kw):
    with db.session() as session:
        return task_history(session, 1, Window(since, until or now, 0), TIERS, now, **kw)


def test_a_recent_window_is_served_from_raw_samples(db) -> None:
    raw_every_10s(db, T0, 30)
    now = T0 + timedelta(minutes=30)
    run(db, now)
    [series], step = history_of(db, now, now - timedelta(minutes=10))
    assert step == 0
    assert len(series.points) == 60
    assert series.points[-1].cpu_cores == 179.0


def test_a_window_older_than_the_raw_samples_uses_minutes_then_raw_for_the_newest_part(db) -> None:
    raw_every_10s(db, T0, 120)
    now = T0 + timedelta(minutes=120)
    run(db, now - timedelta(minutes=5))  # the last 5 minutes are not averaged yet
    [series], step = history_of(db, now, T0)
    assert step == 60
    ats = [p.at for p in series.points]
    assert ats == sorted(ats) and len(set(ats)) == len(ats)
    minutes = [p for p in series.points if p.at < T0 + timedelta(minutes=114)]
    assert len(minutes) == 114 and minutes[0].cpu_cores == 2.5
    assert len(series.points) == 114 + 36  # the raw samples from where the minutes end


def test_a_week_is_served_from_ten_minute_averages_in_at_most_max_points(db) -> None:
    now = T0 + timedelta(days=8)
    with db.session() as session:
        session.add_all(task_row(T0 + timedelta(minutes=10 * k), step=600, cpu=float(k % 3))
                        for k in range(8 * 144))
    [series], step = history_of(db, now, now - timedelta(days=7))
    assert step == 1800  # 1008 ten-minute points, three to a point
    assert len(series.points) <= MAX_POINTS
    assert {p.cpu_cores for p in series.points} == {1.0}


def test_one_task_of_a_job_and_the_jobs_series_per_task(db) -> None:
    with db.session() as session:
        session.add_all([task_row(T0, role="ps"), task_row(T0, index=0), task_row(T0, index=1),
                         task_row(T0, job=2)])
    now = T0 + timedelta(minutes=1)
    all_tasks, _ = history_of(db, now, T0)
    assert [(s.role, s.index) for s in all_tasks] == [("ps", 0), ("worker", 0), ("worker", 1)]
    one, _ = history_of(db, now, T0, role="worker", index=1)
    assert [(s.role, s.index, len(s.points)) for s in one] == [("worker", 1, 1)]


def test_a_nodes_window(db) -> None:
    with db.session() as session:
        session.add_all(NodeSampleRow(node="n1", at=T0 + timedelta(seconds=10 * i), step=0, cpu_pct=float(i),
                                      gpus=[]) for i in range(6))
        session.add(NodeSampleRow(node="n2", at=T0, step=0, cpu_pct=99.0, gpus=[]))
    now = T0 + timedelta(minutes=1)
    with db.session() as session:
        points, step = node_history(session, "n1", Window(T0, now, 0), TIERS, now)
    assert step == 0 and [p.cpu_pct for p in points] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize(("text", "problem"), [
    ("1m:1d", "first tier must be raw"),
    ("raw:1h,1m:1d,90s:2d", "multiple"),
    ("raw:1m,1m:1d", "twice"),
    ("raw:1h,1m:30m", "at least as long"),
    ("raw:1h,1m", "RESOLUTION:KEEP"),
    ("raw:soon", "not a duration"),
])
def test_a_retention_that_could_not_be_kept_is_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_retention(text)


def test_a_long_window_is_averaged_by_the_database_across_tiers_keeping_na(db) -> None:
    now = T0 + timedelta(days=8)
    last_ten = now - timedelta(minutes=20)  # 10-minute averages end here; minutes go on from it
    with db.session() as session:
        session.add_all(task_row(T0 + timedelta(minutes=10 * k), step=600, cpu=2.0, memory=100)
                        for k in range(8 * 144 - 2))
        session.add_all(task_row(last_ten + timedelta(minutes=k), step=60, cpu=4.0, memory=300) for k in range(20))
        session.add_all(task_row(now - timedelta(days=2, minutes=k), step=60, cpu=99.0) for k in range(5))  # averaged
    [series], step = history_of(db, now, now - timedelta(days=7))
    assert step == 1800 and len(series.points) <= MAX_POINTS
    assert all(p.gpu_util_pct is None for p in series.points)
    assert {p.cpu_cores for p in series.points[:-1]} == {2.0}
    # The last half hour: one 10-minute average (2.0) and twenty minutes (4.0), as rows counted.
    assert series.points[-1].at == now - timedelta(minutes=30)
    assert series.points[-1].cpu_cores == (2.0 + 20 * 4.0) / 21
    assert series.points[-1].memory_mb == round((100 + 20 * 300) / 21)


def test_the_retention_setting_is_checked_when_the_settings_are_read(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path) -> None:
    monkeypatch.setenv("TRAINYARD_HOME", str(tmp_path))
    assert Settings().retention == TIERS
    assert [t.step for t in Settings(monitor_retention="raw:2h, 5m:7d").retention] == [0, 300]
    with pytest.raises(ValidationError, match="monitor_retention"):
        Settings(monitor_retention="raw:1h,1m:30m")


# --- Each node's and task's newest sample (node_latest, task_latest) --------------------------


def a_round(at: datetime, *, cpu: float, util: float | None = 50.0, job: int = 1) -> Sampled:
    gpu = GpuSample(index=0, model="A100", memory_total_mb=40960, util_pct=util, memory_used_mb=1000, pids=(7,))
    return Sampled(
        nodes=(NodeSample(node="n1", at=at, cpu_pct=cpu, gpus=(gpu,)),),
        tasks=(TaskSample(job_id=job, attempt=0, role="worker", index=0, node="n1", at=at, cpu_cores=cpu,
                          gpus_held=1.0, gpu_util_pct=util),),
    )


def test_a_round_replaces_each_node_and_tasks_newest_figures_and_a_late_older_round_changes_nothing(db) -> None:
    for at, cpu in ((T0, 1.0), (T0 + timedelta(seconds=10), 2.0), (T0 + timedelta(seconds=5), 9.0)):
        with db.session() as session:
            record(session, a_round(at, cpu=cpu))
    with db.session() as session:
        [node] = metric_queries.latest_node_samples(session, T0)
        [task] = metric_queries.latest_task_samples(session, T0)
        assert (node.at, node.cpu_pct, task.at, task.cpu_cores) == (T0 + timedelta(seconds=10), 2.0) * 2
        # The GPUs as the history keeps them (but the processes), field for field.
        assert node.gpu_dicts() == [{"index": 0, "model": "A100", "memory_total_mb": 40960, "util_pct": 50.0,
                                     "memory_used_mb": 1000, "temperature_c": None, "power_w": None,
                                     "ecc_errors": None, "simulated": False, "healthy": True}]
        assert len(session.scalars(select(NodeSampleRow)).all()) == 3  # the history keeps every round
        # Fresh means taken at or after ``since``: the newest is 10 s old at T0 + 20 s.
        assert metric_queries.latest_node_samples(session, T0 + timedelta(seconds=11)) == []
        assert metric_queries.latest_task_samples(session, T0 + timedelta(seconds=11)) == []


def test_the_newest_figures_of_an_ended_task_go_with_the_raw_history(db) -> None:
    with db.session() as session:
        record(session, a_round(T0, cpu=1.0, job=1))
        record(session, a_round(T0 + timedelta(minutes=30), cpu=1.0, job=2))  # job 1 has ended
    run(db, T0 + timedelta(minutes=61))  # raw samples are kept an hour: job 1's and n1's first go
    with db.session() as session:
        assert [t.job_id for t in metric_queries.latest_task_samples(session, T0)] == [2]
        assert [n.at for n in metric_queries.latest_node_samples(session, T0)] == [T0 + timedelta(minutes=30)]
    run(db, T0 + timedelta(minutes=91))
    with db.session() as session:
        assert metric_queries.latest_task_samples(session, T0) == []
        assert metric_queries.latest_node_samples(session, T0) == []
