"""Elastic jobs (``scheduler/elastic.py``): start at the minimum, grow into idle GPUs up to the
maximum, shrink (never below the minimum) before anything is suspended or stopped, and count
against no quota for the workers beyond the minimum."""

from __future__ import annotations

from dataclasses import replace

from scheduler_world import job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    RunningJob,
    SchedulerConfig,
    TaskPlacement,
    TaskRequest,
    VirtualCluster,
)

OPPO = 3


def workers(count: int, gpu_milli: int = 2000, start: int = 0) -> tuple[TaskRequest, ...]:
    return tuple(TaskRequest("w", i, gpu_milli) for i in range(start, start + count))


def elastic(job_id: int, low: int, high: int, gpu_milli: int = 2000, **kw: object) -> PendingJob:
    base = job(job_id, **kw)  # type: ignore[arg-type]
    return replace(base, tasks=workers(low, gpu_milli), grow=workers(high - low, gpu_milli, low))


def elastic_running(job_id: int, placed: list[TaskPlacement], low: int, high: int, gpu_milli: int = 2000,
                    leaving: tuple[int, ...] = (), **kw: object) -> RunningJob:
    """A running elastic job with ``placed`` workers (index = position), ``low`` of them its minimum."""
    base = running(job_id, *placed, **kw)  # type: ignore[arg-type]
    size = len(placed)
    extra = [("w", i) for i in range(size - 1, low - 1, -1)]
    return replace(base, grow=workers(high - size, gpu_milli, size),
                   shrink=tuple(t for t in extra if t[1] not in leaving),
                   leaving=tuple(("w", i) for i in leaving))


def test_an_elastic_job_starts_at_its_minimum_and_grows_into_idle_gpus_in_the_same_cycle() -> None:
    decisions = schedule(snapshot([node("a")], [elastic(1, 1, 3)]))
    assert [s.job_id for s in decisions.starts] == [1]
    assert sorted(p.index for p in decisions.starts[0].placements) == [0, 1, 2]
    assert decisions.grows == () and decisions.shrinks == ()


def test_it_starts_with_its_minimum_when_only_that_fits() -> None:
    work = [running(90, on("a", 0, 1, 2, 3, 4, 5))]  # 2 GPUs left
    decisions = schedule(snapshot([node("a")], [elastic(1, 1, 3)], work))
    assert len(decisions.starts[0].placements) == 1


def test_a_job_whose_minimum_does_not_fit_waits_like_any_gang() -> None:
    work = [running(90, on("a", 0, 1, 2, 3, 4, 5, 6))]  # 1 GPU left, a worker needs 2
    decisions = schedule(snapshot([node("a")], [elastic(1, 1, 3)], work))
    assert decisions.starts == () and decisions.waits[0].reason == PendingReason.NO_FIT


def test_a_running_elastic_job_grows_up_to_its_maximum_and_no_further() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1)], 1, 3)
    decisions = schedule(snapshot([node("a")], [], [job_1]))
    assert [(g.job_id, [p.index for p in g.placements]) for g in decisions.grows] == [(1, [1, 2])]
    full = elastic_running(1, [on("a", 0, 1), on("a", 2, 3), on("a", 4, 5)], 1, 3)
    assert schedule(snapshot([node("a")], [], [full])).grows == ()


def test_a_job_grows_no_sooner_than_the_grow_interval_after_its_last_start_or_resize() -> None:
    """Hysteresis (``SchedulerConfig.grow_interval``): each resize restarts every worker, so GPUs
    that free for a moment do not grow a job that has just (re)started."""
    config = SchedulerConfig(grow_interval=30.0)
    started = elastic_running(1, [on("a", 0, 1)], 1, 3, started=100.0)
    assert schedule(snapshot([node("a")], [], [started], now=120.0, config=config)).grows == ()
    assert schedule(snapshot([node("a")], [], [started], now=130.0, config=config)).grows != ()
    resized = replace(started, resized_at=125.0)  # shrunk at 125: its workers restarted then
    assert schedule(snapshot([node("a")], [], [resized], now=140.0, config=config)).grows == ()
    assert schedule(snapshot([node("a")], [], [resized], now=155.0, config=config)).grows != ()
    # A job that starts grows at its start (GPUs idle then), and nothing holds a shrink back.
    assert len(schedule(snapshot([node("a")], [elastic(2, 1, 3)], now=140.0, config=config)).starts[0].placements) == 3


def test_growth_comes_after_every_waiting_job_even_opportunistic_work() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1)], 1, 4, rank=0)
    decisions = schedule(snapshot([node("a")], [job(2, 4000, rank=OPPO)], [job_1]))
    assert [s.job_id for s in decisions.starts] == [2]
    assert [len(g.placements) for g in decisions.grows] == [1]  # the last 2 GPUs


def test_jobs_grow_in_turns_with_linear_speedups_the_one_with_fewest_workers_first() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1), on("a", 2, 3)], 1, 4)  # 2 of 4
    job_2 = elastic_running(2, [on("b", 0, 1)], 1, 4)  # 1 of 4
    nodes = [node("a", 4), node("b", 4)]  # 2 GPUs free on b, none on a: only job 2 fits there
    decisions = schedule(snapshot(nodes, [], [job_1, job_2]))
    assert [(g.job_id, len(g.placements)) for g in decisions.grows] == [(2, 1)]
    nodes = [node("a", 8), node("b", 2)]
    decisions = schedule(snapshot(nodes, [], [running(9, on("a", 0, 1, 2, 3)), job_1, job_2]))
    # 4 GPUs free on a: job 2 (1 of 4) goes first, then job 1 and job 2 are both at 2 of 4:
    # the one running longer (the lower id, equal starts) grows.
    assert sorted((g.job_id, len(g.placements)) for g in decisions.grows) == [(1, 1), (2, 1)]


def test_a_waiting_job_shrinks_an_elastic_job_before_stopping_opportunistic_work() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1), on("a", 2, 3), on("a", 4, 5)], 1, 3)
    oppo = running(2, on("a", 6, 7), rank=OPPO)
    decisions = schedule(snapshot([node("a")], [job(3, 2000, rank=0)], [job_1, oppo]))
    assert decisions.preemptions == ()
    assert [(s.job_id, s.tasks, s.for_job_id) for s in decisions.shrinks] == [(1, (("w", 2),), 3)]
    wait = next(w for w in decisions.waits if w.job_id == 3)
    assert wait.reason == PendingReason.PREEMPTING and "job(s) 1 " in wait.message


def test_never_below_the_minimum_the_job_itself_is_then_the_victim() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1, 2, 3), on("a", 4, 5, 6, 7)], 1, 2, gpu_milli=4000, rank=2)
    decisions = schedule(snapshot([node("a")], [job(3, 8000, rank=0)], [job_1]))
    # It needs the whole node: the extra worker alone is not enough, so the job stops whole
    # (a job stopped is not also shrunk).
    assert [p.job_id for p in decisions.preemptions] == [1] and decisions.shrinks == ()


def test_a_job_losing_workers_does_not_grow_and_its_leaving_workers_count_as_stopping() -> None:
    job_1 = elastic_running(1, [on("a", 0, 1), on("a", 2, 3), on("a", 4, 5)], 1, 4, leaving=(2,))
    decisions = schedule(snapshot([node("a")], [], [job_1]))
    assert decisions.grows == ()  # 2 GPUs idle, but it is resizing
    # A job that needs the leaving worker's GPUs waits for it, shrinking nothing more.
    decisions = schedule(snapshot([node("a")], [job(3, 4000, rank=0)], [job_1]))
    assert decisions.shrinks == () and decisions.preemptions == ()
    assert next(w for w in decisions.waits if w.job_id == 3).reason == PendingReason.PREEMPTING


def test_extra_workers_count_against_no_quota_and_the_vc_takes_its_quota_back() -> None:
    vision = VirtualCluster("vision", {"A100": 8})
    nlp = VirtualCluster("nlp", {"A100": 8})
    nodes = [node("a"), node("b")]
    # nlp's elastic job, its minimum in its quota, grew onto vision's idle node.
    job_1 = elastic_running(1, [on("b", 0, 1), on("a", 0, 1), on("a", 2, 3)], 1, 8, vc="nlp")
    decisions = schedule(snapshot(nodes, [job(2, 8000, vc="vision")], [job_1], vcs=(vision, nlp)))
    assert [s.tasks for s in decisions.shrinks] == [(("w", 2), ("w", 1))]
    assert decisions.preemptions == ()
    # Its own VC's next job is not refused for quota because of the extras: it is placed
    # beside them (nlp has 6 GPUs of quota left, and node b 6 free GPUs).
    decisions = schedule(snapshot(nodes, [job(3, 6000, vc="nlp")], [job_1], vcs=(vision, nlp)))
    assert [s.job_id for s in decisions.starts] == [3]


def test_growth_leaves_a_reservation_alone() -> None:
    # Job 2 (8 GPUs) waits for the whole node: the reservation holds what frees, and the
    # elastic job does not grow into GPUs it holds.
    config = SchedulerConfig(drain_after=0.0)
    job_1 = elastic_running(1, [on("a", 0, 1)], 1, 4, rank=2)
    hog = running(9, on("a", 2, 3), rank=0, end=100.0)
    decisions = schedule(snapshot([node("a")], [job(2, 8000, rank=0)], [job_1, hog], config=config, now=1000.0))
    assert decisions.grows == ()
    assert next(w for w in decisions.waits if w.job_id == 2).reason == PendingReason.NO_FIT


def test_a_job_started_as_borrowed_work_grows_too() -> None:
    vision = VirtualCluster("vision", {"A100": 8})
    nlp = VirtualCluster("nlp", {"A100": 8})
    work = [running(90, on("a", *range(8)), vc="vision")]
    decisions = schedule(snapshot([node("a"), node("b")], [elastic(1, 1, 3, vc="vision")], work,
                                  vcs=(vision, nlp)))
    assert [(s.job_id, s.borrowed, len(s.placements)) for s in decisions.starts] == [(1, True, 3)]


def test_a_known_curve_grows_the_job_a_worker_speeds_up_most_and_never_past_its_best() -> None:
    flat = ((1, 1.0), (2, 1.9), (3, 1.95))  # a third worker adds 3 %, a fourth nothing
    steep = ((1, 1.0), (4, 4.0))
    job_1 = replace(elastic_running(1, [on("a", 0, 1), on("a", 2, 3)], 1, 4), speedup=flat)
    job_2 = replace(elastic_running(2, [on("b", 0, 1), on("b", 2, 3)], 1, 4), speedup=steep)
    nodes = [node("a", 8), node("b", 4)]  # 4 GPUs free on a: room for two more workers
    decisions = schedule(snapshot(nodes, [], [job_1, job_2]))
    # Job 2 gains 50 % from a third worker, job 1 3 %: job 2 first, and its fourth worker
    # (+33 %) before job 1's third.
    assert [(g.job_id, len(g.placements)) for g in decisions.grows] == [(2, 2)]
    alone = replace(elastic_running(1, [on("a", 0, 1), on("a", 2, 3), on("a", 4, 5)], 1, 4), speedup=flat)
    assert schedule(snapshot([node("a")], [], [alone])).grows == ()  # a fourth worker would add nothing


def test_the_workers_whose_jobs_lose_least_without_them_go_first() -> None:
    flat = ((1, 1.0), (2, 1.9), (3, 1.95))
    job_1 = replace(elastic_running(1, [on("a", 0, 1), on("a", 2, 3), on("a", 4, 5)], 1, 3), speedup=flat)
    job_2 = elastic_running(2, [on("b", 0, 1), on("b", 2, 3), on("b", 4, 5)], 1, 3)  # linear: a third is worth 1/3
    nodes = [node("a", 6), node("b", 6)]
    decisions = schedule(snapshot(nodes, [job(3, 2000, rank=0)], [job_1, job_2]))
    assert [(s.job_id, s.tasks) for s in decisions.shrinks] == [(1, (("w", 2),))]
