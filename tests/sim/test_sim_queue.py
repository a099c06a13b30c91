"""The queueing track: conservation laws on random traces, policy behaviour, real Philly days."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_data import PHILLY

from trainyard.core.states import AttemptState, JobState
from trainyard.core.transitions import EventKind
from trainyard.scheduler.snapshot import SchedulerConfig
from trainyard.sim.defaults import SUSPEND_COST
from trainyard.sim.jobs import (
    TraceJob,
    gang_tasks,
    load_history,
    load_openb_jobs,
    load_philly,
    load_vc_nodes,
    parse_cluster,
    parse_time,
    uniform_cluster,
    window,
)
from trainyard.sim.queue import POLICIES, QueueResult, QueueSim, policy_named, vc_quotas
from trainyard.sim.queue_track import percentile, private_cluster, report
from trainyard.sim.traces import PHILLY_MACHINES, PHILLY_VC_NODES, trace_file


def check_conservation(result: QueueResult, jobs: list[TraceJob]) -> None:
    """JCT ≥ duration, GPU-seconds conserved (the work plus what suspensions cost),
    capacity never exceeded, Little's law."""
    done = [o for o in result.outcomes.values() if o.end is not None]
    assert len(done) + len(result.rejected) + len(result.never_started) == len(jobs)
    assert not result.never_started  # every job here fits some node shape
    for o in done:
        assert o.first_start is not None and o.first_start >= o.job.submit
        assert o.jct >= o.job.duration - 1e-6
    demand = sum(o.job.gpus * o.job.duration for o in done)
    assert math.isclose(result.busy_gpu_seconds, demand + result.lost_gpu_seconds, rel_tol=1e-9, abs_tol=1e-6)
    assert result.lost_gpu_seconds <= result.suspensions * SUSPEND_COST * result.gpus
    assert result.peak_gpus_busy <= result.gpus
    assert result.peak_device_milli <= 1000
    # Little's law over the whole run: mean jobs in system = arrival rate × mean time in system.
    span = result.last_end - result.first_submit
    if done and span > 0:
        in_system = result.job_seconds / span
        rate = len(done) / span
        mean_jct = sum(o.jct for o in done) / len(done)
        assert math.isclose(in_system, rate * mean_jct, rel_tol=1e-6)


trace_job = st.builds(
    lambda i, submit, duration, gpus, vc: TraceJob(i, float(submit), float(duration), gpus, vc),
    st.integers(1, 10**6),
    st.integers(0, 20_000),
    st.integers(1, 30_000),
    st.sampled_from([1, 1, 1, 2, 4, 8, 16]),
    st.sampled_from(["a", "b"]),
)


def distinct(jobs: list[TraceJob]) -> list[TraceJob]:
    return list({j.job_id: j for j in jobs}.values())


@settings(max_examples=25, deadline=None)
@given(st.lists(trace_job, min_size=1, max_size=25).map(distinct), st.sampled_from(sorted(POLICIES)),
       st.sampled_from([0.0, 60.0]))
def test_every_policy_conserves_work_and_respects_capacity(jobs: list[TraceJob], policy: str, tick: float) -> None:
    sim = QueueSim(uniform_cluster(2, 8), jobs, policy_named(policy), tick=tick)
    progress: list[float] = []
    result = sim.run(progress.append)
    check_conservation(result, jobs)
    check_lifecycle(sim)
    check_progress(progress)


def check_progress(fractions: list[float]) -> None:
    """What a run reports of its progress only grows, from 0 to 1, and ends done."""
    assert fractions and fractions[-1] == 1.0
    assert all(0 <= a <= b <= 1 for a, b in zip(fractions, fractions[1:]))


def check_lifecycle(sim: QueueSim) -> None:
    """Every job that ran went through the controller's states: done jobs SUCCEEDED, one
    attempt per start, each preempted attempt either requeued or finished within its grace."""
    for job_id, outcome in sim.result.outcomes.items():
        record = sim.records[job_id]
        assert record.state == JobState.SUCCEEDED and record.exit_code == 0
        assert record.attempt <= outcome.preemptions == sum(e.kind == EventKind.PREEMPTED for e in record.history)
        assert [e.kind for e in record.history][-1] == EventKind.SUCCEEDED
        assert all(a.state == AttemptState.PREEMPTED for a in record.attempts[:-1])


@settings(max_examples=15, deadline=None)
@given(st.lists(trace_job, min_size=1, max_size=20).map(distinct))
def test_vc_quotas_keep_the_laws_and_refuse_jobs_larger_than_their_quota(jobs: list[TraceJob]) -> None:
    vcs = vc_quotas(jobs, 16, {"a": 3, "b": 1})
    assert sum(sum(v.quota.values()) for v in vcs) <= 16
    result = QueueSim(uniform_cluster(2, 8), jobs, policy_named("default"), vcs=vcs).run()
    check_conservation(result, jobs)
    quota = {v.name: sum(v.quota.values()) for v in vcs}
    assert all(j.gpus > quota[j.vc] for j in result.rejected)


def test_sjf_runs_the_short_job_first_and_fifo_the_first_submitted() -> None:
    jobs = [TraceJob(1, 0.0, 1000.0, 8), TraceJob(2, 1.0, 5000.0, 8), TraceJob(3, 2.0, 10.0, 8)]
    fifo = QueueSim(uniform_cluster(1, 8), jobs, policy_named("fifo")).run().outcomes
    sjf = QueueSim(uniform_cluster(1, 8), jobs, policy_named("sjf")).run().outcomes
    assert fifo[2].first_start == 1000.0 and fifo[3].first_start == 6000.0
    assert sjf[3].first_start == 1000.0 and sjf[2].first_start == 1010.0


def test_a_bound_on_starts_per_cycle_runs_the_next_cycle_at_the_same_instant() -> None:
    jobs = [TraceJob(i, 0.0, 100.0, 1) for i in range(1, 9)]
    bounded = QueueSim(uniform_cluster(1, 8), jobs, policy_named("fifo", max_starts=3)).run()
    check_conservation(bounded, jobs)
    assert all(o.first_start == 0.0 for o in bounded.outcomes.values())  # 3 + 3 + 2 starts at t=0
    assert bounded.cycles == 3 and QueueSim(uniform_cluster(1, 8), jobs, policy_named("fifo")).run().cycles == 1
    with pytest.raises(ValueError, match="--max-starts"):
        policy_named("fifo", max_starts=-1)


def test_tiresias_preempts_a_job_that_attained_much_for_a_new_one_and_resumes_it() -> None:
    jobs = [TraceJob(1, 0.0, 20_000.0, 8), TraceJob(2, 10_000.0, 100.0, 8)]
    sim = QueueSim(uniform_cluster(1, 8), jobs, policy_named("tiresias"))
    result = sim.run()
    check_conservation(result, jobs)
    check_lifecycle(sim)
    long, short = result.outcomes[1], result.outcomes[2]
    assert short.first_start == 10_000.0 and short.end == 10_100.0  # job 1 is past 10 GPU-hours
    assert long.preemptions == 1 and long.end == 20_100.0 + SUSPEND_COST  # it is suspendable: its checkpoint
    # Job 1's history is a live job's: preempted, requeued as attempt 1, which succeeded.
    assert [e.kind for e in sim.records[1].history] == [
        EventKind.SUBMITTED, EventKind.PLACED, EventKind.PREEMPTED, EventKind.REQUEUED, EventKind.PLACED,
        EventKind.SUCCEEDED,
    ]
    assert [a.state for a in sim.records[1].attempts] == [AttemptState.PREEMPTED, AttemptState.SUCCEEDED]
    fifo = QueueSim(uniform_cluster(1, 8), jobs, policy_named("fifo")).run()
    assert fifo.outcomes[2].first_start == 20_000.0 and fifo.preemptions == 0


@pytest.mark.parametrize(("suspendable", "long_id", "turns"), [("all", 1, True), ("half", 2, True),
                                                               ("half", 1, False), ("none", 2, False)])
def test_a_short_job_takes_its_turn_from_a_long_one_and_the_suspension_costs_its_checkpoint(
        suspendable: str, long_id: int, turns: bool) -> None:
    jobs = [TraceJob(long_id, 0.0, 20_000.0, 8), TraceJob(3, 10_000.0, 100.0, 8)]
    sim = QueueSim(uniform_cluster(1, 8), jobs, policy_named("default"), suspendable=suspendable)
    result = sim.run()
    check_conservation(result, jobs)
    check_lifecycle(sim)
    long, short = result.outcomes[long_id], result.outcomes[3]
    if not turns:  # only suspendable jobs take turns (half: those of even ids)
        assert short.first_start == 20_000.0 and result.suspensions == result.lost_gpu_seconds == 0
        return
    assert short.first_start == 10_000.0 and short.end == 10_100.0
    assert long.suspensions == result.suspensions == 1
    assert long.end == 10_100.0 + SUSPEND_COST + 10_000.0  # restoring its checkpoint first
    assert result.lost_gpu_seconds == 8 * SUSPEND_COST
    summary = report(result)
    assert summary["lost_gpu_hours"] == 8 * SUSPEND_COST / 3600
    assert math.isclose(summary["suspensions_per_job_hour"], 1 / (20_100.0 / 3600))


def test_a_job_is_suspended_no_sooner_than_a_time_slice_after_it_started() -> None:
    jobs = [TraceJob(2, 0.0, 20_000.0, 8), TraceJob(3, 600.0, 100.0, 8)]
    result = QueueSim(uniform_cluster(1, 8), jobs, policy_named("default", time_slice=1200.0)).run()
    assert result.outcomes[3].first_start == 1200.0  # the end of job 2's slice, not its arrival
    free = QueueSim(uniform_cluster(1, 8), jobs, policy_named("default"), suspend_cost=0.0).run()
    assert free.outcomes[3].first_start == SchedulerConfig().time_slice and free.lost_gpu_seconds == 0
    assert free.outcomes[2].end == 20_100.0


def test_a_turn_is_taken_when_the_running_job_passes_the_floor_of_service_not_before() -> None:
    """The running job (8 GPUs) passes a 24,000 GPU-s floor at 3,000 s, after its slice
    (1,200 s): the waiting job's turn comes then, with nothing else happening to wake the
    loop."""
    jobs = [TraceJob(2, 0.0, 20_000.0, 8), TraceJob(3, 600.0, 100.0, 8)]
    policy = policy_named("default", time_slice=1200.0)
    policy = replace(policy, config=replace(policy.config, turn_floor=8 * 3000.0))
    result = QueueSim(uniform_cluster(1, 8), jobs, policy).run()
    assert result.outcomes[3].first_start == pytest.approx(3000.0)  # once past it: "more than"
    assert result.suspensions == 1


def test_gangs_larger_than_a_node_span_nodes() -> None:
    assert gang_tasks(20, 8) == [8000, 8000, 4000]
    jobs = [TraceJob(1, 0.0, 100.0, 20)]
    result = QueueSim(uniform_cluster(3, 8), jobs, policy_named("default")).run()
    assert result.outcomes[1].first_start == 0.0 and result.peak_gpus_busy == 20


def test_percentile_is_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 99) == 5.0
    assert percentile(list(map(float, range(1, 101))), 50) == 50.0
    assert percentile([], 99) == 0.0


# --- loaders ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def philly() -> list[TraceJob]:
    return load_philly(PHILLY)


def test_the_philly_table_loads_with_its_vcs_and_a_window_selects_october(philly: list[TraceJob]) -> None:
    jobs = philly
    assert len(jobs) == 82_247
    assert len({j.vc for j in jobs}) == 15
    october = window(jobs, parse_time("2017-10-01"), parse_time("2017-11-01"))
    assert len(october) == 47_192
    squeezed = window(october[:100], None, None, load=2.0)
    assert squeezed[-1].submit - squeezed[0].submit == pytest.approx((october[99].submit - october[0].submit) / 2)


def test_philly_machine_lists_and_vc_shares_load() -> None:
    machines = parse_cluster("philly")
    assert parse_cluster(str(trace_file(*PHILLY_MACHINES))) == machines
    assert sum(len(n.gpus) for n in machines) == 2490
    assert sum(len(n.gpus) for n in parse_cluster("92x8")) == 736
    shares = load_vc_nodes(trace_file(*PHILLY_VC_NODES))
    assert len(shares) == 11 and shares["6214e9"] == 64
    assert sum(len(n.gpus) for n in private_cluster(20)) == 20


def test_trainyards_own_history_export_becomes_a_trace(tmp_path: Path) -> None:
    page = {"items": [
        {"id": 7, "vc": "vision", "user": "ann", "gpus": 2.0, "submittedAt": "2026-11-01T10:00:00Z",
         "startedAt": "2026-11-01T10:05:00Z", "finishedAt": "2026-11-01T11:05:00Z"},
        {"id": 8, "vc": "nlp", "user": "bob", "gpus": 1.0, "submittedAt": "2026-11-01T10:01:00Z",
         "startedAt": None, "finishedAt": None},
        {"id": 9, "vc": "nlp", "user": "bob", "gpus": 0.0, "submittedAt": "2026-11-01T10:02:00Z",
         "startedAt": "2026-11-01T10:02:00Z", "finishedAt": "2026-11-01T10:03:00Z"},
    ], "next": None}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(page))
    [job] = load_history(path)
    assert (job.job_id, job.vc, job.user, job.gpus, job.duration) == (7, "vision", "ann", 2, 3600.0)
    assert job.submit == parse_time("2026-11-01T10:00:00Z")
    lines = tmp_path / "jobs.jsonl"
    lines.write_text(json.dumps(page) + "\n" + json.dumps(page) + "\n")
    assert len(load_history(lines)) == 2
    result = QueueSim(uniform_cluster(1, 8), load_history(path), policy_named("default")).run()
    assert report(result)["jobs"] == 1


@pytest.mark.parametrize("policy", ["default", "tiresias"])
def test_a_busy_philly_day_replays_through_the_scheduler_within_the_laws(policy: str,
                                                                        philly: list[TraceJob]) -> None:
    day = window(philly, parse_time("2017-10-09"), parse_time("2017-10-10"))
    nodes = uniform_cluster(16, 8)  # a small cluster, so that jobs queue
    result = QueueSim(nodes, day, policy_named(policy), tick=60.0).run()
    check_conservation(result, day)
    summary = report(result)
    assert summary["avg_queueing_h"] > 0 and summary["jobs"] == len(day) - len(result.rejected)
    assert 0 < summary["gpu_utilisation"] <= 1


def test_consolidation_shortens_the_wait_of_large_jobs_within_its_budget(philly: list[TraceJob]) -> None:
    """docs/benchmarks.md's consolidation table, its small row: half a busy Philly day on
    8 nodes of 8 GPUs, today's default against the same with at most 6 moves an hour."""
    jobs = window(philly, parse_time("2017-10-09T06:00"), parse_time("2017-10-09T18:00"))
    nodes = uniform_cluster(8, 8)
    before = report(QueueSim(nodes, jobs, policy_named("default"), tick=60.0).run())
    moved = QueueSim(nodes, jobs, policy_named("default", moves_per_hour=6), tick=60.0).run()
    check_conservation(moved, jobs)
    after = report(moved)
    assert (before["large_jobs"], before["moves"], after["large_jobs"], after["moves"]) == (18, 0, 18, 29)
    assert (round(before["large_avg_queueing_h"], 2), round(after["large_avg_queueing_h"], 2)) == (4.63, 2.81)
    assert all(sum(1 for u in moved.move_times if t - 3600 < u <= t) <= 6 for t in moved.move_times)
    assert 0 < after["move_lost_gpu_hours"] <= after["lost_gpu_hours"]


def test_an_openb_pod_list_becomes_jobs_with_their_departures(tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,1024,8,1000,,LS,Succeeded,100,4000,400\n"  # 8 GPUs, ran 400 -> 4000
        "p1,1000,1024,1,250,,LS,Running,50,90,\n"  # a fraction: one whole GPU; never scheduled: from creation
        "p2,1000,1024,0,0,,LS,Running,10,20,10\n"  # CPU only: left out
        "p3,1000,1024,2,1000,,LS,Running,30,,30\n"  # never deleted: left out
    )
    jobs = load_openb_jobs(pods)
    assert [(j.submit, j.duration, j.gpus) for j in jobs] == [(50.0, 40.0, 1), (100.0, 3600.0, 8)]
