"""Usage accounting on a real store (SQLite, and PostgreSQL when configured): exact hours for
known runs clipped to a period, a running task up to now, a preempted job's attempts summed,
groups, who may see what, efficiency with and without samples, and the same answer after a
"restart" (a new engine on the same store)."""

from __future__ import annotations

import pytest
from services.usage_world import Run, add_job, add_sample, at

from trainyard.core.clock import FakeClock
from trainyard.schemas.usage import UsageReport
from trainyard.services import admin, auth
from trainyard.services import usage as usage_service
from trainyard.services.errors import Forbidden, Invalid, NotFound
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

NOW = at(7)
# Job A's monitoring: two downsampled hours (40 % then 60 %), three raw rows at 100 %, one at
# 0 % after a gap nobody measured; always 2 of its 4 CPU cores busy.
A_MEASURED = 2 * (0.5 + 1 + (10 + 10 + 15 + 15) / 3600)
A_USED = 2 * (0.4 * 0.5 + 0.6 * 1 + 35 / 3600)


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    """alice (groups cv, nlp), bob (cv), carol (none), root (admin). In the period [2h, 6h):
    A (alice, VC vision) holds 2 GPUs throughout; B (bob) was preempted and ran two half-GPU
    attempts of 1 h each in it; C (carol) started at 5 h and still runs; D (alice) ended
    before the period."""
    clock = FakeClock(at(-1))
    with db.session() as s:
        users = {n: auth.create_user(s, n, is_admin=n == "root", clock=clock)
                 for n in ("root", "alice", "bob", "carol")}
        for group, members in (("cv", ("alice", "bob")), ("nlp", ("alice",))):
            admin.create_group(s, group, clock=clock)
            for member in members:
                admin.add_member(s, group, member)
        a = add_job(s, users["alice"], [[Run(at(0), at(10), gpus=[[0, 1000], [1, 1000]], cpu_milli=4000,
                                             memory_mb=8192)]], vc="vision", name="resnet")
        b = add_job(s, users["bob"], [[Run(at(1), at(3), gpus=[[2, 500]])], [Run(at(4), at(5), gpus=[[2, 500]])]])
        c = add_job(s, users["carol"], [[Run(at(5), None, gpus=[[3, 1000]], cpu_milli=2000, memory_mb=2048)]])
        d = add_job(s, users["alice"], [[Run(at(0), at(1))]])
        for when, step, util in ((at(1.5), 3600, 40.0), (at(2.5), 3600, 60.0), (at(3.5), 0, 100.0),
                                 (at(3.5, 10), 0, 100.0), (at(3.5, 20), 0, 100.0), (at(5.5), 0, 0.0)):
            add_sample(s, a, when, step=step, gpus_held=2, gpu_util_pct=util, cpu_cores=2.0)
        add_sample(s, b, at(4), step=3600, attempt=1, gpus_held=0.5, gpu_util_pct=None, cpu_cores=0.25)
    return {"A": a, "B": b, "C": c, "D": d}


def report(db: Database, caller: str, **kwargs: object) -> UsageReport:
    since, until = kwargs.pop("since", at(2)), kwargs.pop("until", at(6))
    with db.session() as s:
        user = s.query(UserRow).filter_by(name=caller).one()
        period = usage_service.period_of(since, until, NOW)  # type: ignore[arg-type]
        return usage_service.usage_report(s, user, period=period, monitor_interval_seconds=10,
                                          **{"by": "user", **kwargs})  # type: ignore[arg-type]


def figures(rep: UsageReport) -> dict[str, tuple[int, float, float, float]]:
    return {line.name: (line.jobs, round(line.gpuHours, 9), round(line.cpuHours, 9), round(line.memoryGibHours, 9))
            for line in rep.lines}


def test_hours_per_user_are_the_runs_clipped_to_the_period_with_a_preempted_jobs_attempts_summed(
    db: Database, world: dict[str, int]
) -> None:
    rep = report(db, "root")
    assert figures(rep) == {"alice": (1, 8.0, 16.0, 32.0), "bob": (1, 1.0, 2.0, 2.0), "carol": (1, 1.0, 2.0, 2.0)}
    assert [line.name for line in rep.lines] == ["alice", "bob", "carol"]  # most GPU-hours first, then by name
    assert (rep.total.jobs, rep.total.gpuHours) == (3, 10.0)


def test_a_running_task_counts_up_to_now(db: Database, world: dict[str, int]) -> None:
    rep = report(db, "root", until=None)  # [2h, now = 7h)
    assert figures(rep)["carol"] == (1, 2.0, 4.0, 4.0)
    assert figures(rep)["alice"][1] == 10.0


def test_lines_by_vc_group_and_job(db: Database, world: dict[str, int]) -> None:
    assert figures(report(db, "root", by="vc")) == {"vision": (1, 8.0, 16.0, 32.0), "default": (2, 2.0, 4.0, 4.0)}
    by_group = figures(report(db, "root", by="group"))
    assert by_group == {"cv": (2, 9.0, 18.0, 34.0), "nlp": (1, 8.0, 16.0, 32.0), "(no group)": (1, 1.0, 2.0, 2.0)}
    only_cv = report(db, "root", by="group", group="cv")
    assert figures(only_cv) == {"cv": (2, 9.0, 18.0, 34.0)} and only_cv.total.gpuHours == 9.0
    by_job = report(db, "root", by="job")
    assert [line.name for line in by_job.lines] == [str(world["C"]), str(world["B"]), str(world["A"])]
    assert (by_job.lines[2].jobName, by_job.lines[2].user, by_job.lines[2].vc) == ("resnet", "alice", "vision")


def test_efficiency_comes_from_samples_and_is_none_where_nothing_was_measured(
    db: Database, world: dict[str, int]
) -> None:
    lines = {line.name: line for line in report(db, "root", by="job").lines}
    a, b, c = lines[str(world["A"])], lines[str(world["B"])], lines[str(world["C"])]
    assert a.gpuHoursUsed == pytest.approx(A_USED) and a.gpuEfficiency == pytest.approx(A_USED / A_MEASURED)
    assert a.cpuEfficiency == pytest.approx(0.5)
    assert b.gpuEfficiency is None and b.gpuHoursUsed is None  # simulated GPU: n/a, never invented
    assert b.cpuEfficiency == pytest.approx(0.25)
    assert c.gpuEfficiency is None and c.cpuEfficiency is None  # no samples at all
    cv = report(db, "root", by="group", group="cv").lines[0]
    assert cv.gpuEfficiency == pytest.approx(A_USED / A_MEASURED)  # bob's unmeasured hours do not dilute it


def test_a_user_sees_only_their_own_jobs_in_every_grouping_and_may_not_ask_for_another(
    db: Database, world: dict[str, int]
) -> None:
    assert figures(report(db, "alice")) == {"alice": (1, 8.0, 16.0, 32.0)}
    assert figures(report(db, "alice", user="alice")) == {"alice": (1, 8.0, 16.0, 32.0)}
    assert figures(report(db, "bob", by="group")) == {"cv": (1, 1.0, 2.0, 2.0)}
    assert [line.name for line in report(db, "bob", by="job").lines] == [str(world["B"])]
    assert report(db, "carol", vc="vision").lines == []
    for other in ("bob", "nobody"):  # whether or not they exist: nothing learnt of other users
        with pytest.raises(Forbidden, match="only an admin sees another user's usage"):
            report(db, "alice", user=other)
    assert figures(report(db, "root", user="bob")) == {"bob": (1, 1.0, 2.0, 2.0)}


def test_unknown_names_and_empty_periods_are_refused_naming_the_field(db: Database, world: dict[str, int]) -> None:
    with pytest.raises(NotFound) as unknown:
        report(db, "root", user="nobody")
    assert unknown.value.details == [{"path": "user", "message": "no such user"}]
    with pytest.raises(NotFound, match="no group named 'nogroup'"):
        report(db, "root", group="nogroup")
    with pytest.raises(Invalid) as empty:
        report(db, "root", since=at(6), until=at(6))
    assert empty.value.details[0]["path"] == "since"


def test_the_default_period_is_the_week_before_until(db: Database, world: dict[str, int]) -> None:
    rep = report(db, "root", since=None, until=at(24 * 7 + 1))  # D ended at 1 h: just outside
    assert rep.since == at(1) and figures(rep)["alice"][0] == 1


def test_the_same_store_gives_the_same_answer_after_a_restart(
    db: Database, database_url: str, world: dict[str, int]
) -> None:
    before = report(db, "root", by="job")
    db.dispose()
    again = Database(database_url)  # a new engine and new sessions, as after `yard up` restarts
    try:
        assert report(again, "root", by="job") == before
    finally:
        again.dispose()


def test_recent_gpu_hours_decay_with_the_half_life_over_every_run_not_only_the_period(
    db: Database, world: dict[str, int]
) -> None:
    """Fair share's figure: each task run's GPU-seconds decayed to the report's end, now for a
    report up to now (``run_usage``), in hours, by line; by VC, the part on borrowed GPUs; in
    a report up to now, a user with recent usage and nothing in the period has a line of zero
    hours."""
    from trainyard.scheduler.fairshare import run_usage
    from trainyard.store.rows import AttemptRow

    with db.session() as s:
        s.query(AttemptRow).filter_by(job_id=world["B"], number=1).one().borrowed = True
    h, now = 3600.0, NOW.timestamp()

    def recent(gpus: float, start: float, end: float | None) -> float:
        return run_usage(gpus, at(start).timestamp(), now if end is None else at(end).timestamp(), now, h) / 3600

    alice = recent(2, 0, 10) + recent(1, 0, 1)  # A (cut at now) and D, which ended before the period
    bob_first, bob_borrowed = recent(0.5, 1, 3), recent(0.5, 4, 5)
    carol = recent(1, 5, None)
    rep = report(db, "root", since=at(5.5), until=None, fair_share_half_life=h)
    assert rep.fairShareHalfLifeSeconds == h
    lines = {line.name: line for line in rep.lines}
    assert {name: line.gpuHours for name, line in lines.items()} == {"alice": 3.0, "carol": 1.5, "bob": 0.0}
    assert {name: line.recentGpuHours for name, line in lines.items()} == pytest.approx(
        {"alice": alice, "carol": carol, "bob": bob_first + bob_borrowed})
    assert rep.total.recentGpuHours == pytest.approx(alice + carol + bob_first + bob_borrowed)
    by_vc = {line.name: line for line in report(db, "root", by="vc", until=None, fair_share_half_life=h).lines}
    assert by_vc["default"].recentGpuHours == pytest.approx(recent(1, 0, 1) + bob_first + bob_borrowed + carol)
    assert by_vc["default"].recentBorrowedGpuHours == pytest.approx(bob_borrowed)
    assert by_vc["vision"].recentBorrowedGpuHours == 0.0
    # A user's own report counts their own runs alone; fair share off: no figure at all.
    mine = report(db, "bob", until=None, fair_share_half_life=h).lines
    assert [(line.name, line.recentGpuHours) for line in mine] == [("bob", pytest.approx(bob_first + bob_borrowed))]
    # A past period's figure is as of its end, so it does not change as time goes by.
    past = report(db, "bob", until=at(6), fair_share_half_life=h).lines[0].recentGpuHours
    as_of_6 = (run_usage(0.5, at(1).timestamp(), at(3).timestamp(), at(6).timestamp(), h)
               + run_usage(0.5, at(4).timestamp(), at(5).timestamp(), at(6).timestamp(), h)) / 3600
    assert past == pytest.approx(as_of_6)
    off = report(db, "root")
    assert off.fairShareHalfLifeSeconds is None and off.lines[0].recentGpuHours is None
