"""Pollux's workloads and application models (``sim/pollux.py``): what loads, the curves'
shape, one job's time by hand, and the errors a wrong name gets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainyard.sim import pollux
from trainyard.sim.jobs import TraceJob
from trainyard.sim.pollux import ThroughputCurve, application, linear_job, load_workload


@pytest.fixture(autouse=True)
def only_the_shipped_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINYARD_TRACES", raising=False)


def test_each_workload_at_load_1_is_160_jobs_in_submit_order_within_their_elastic_range() -> None:
    for number in pollux.WORKLOADS:
        jobs = load_workload(number)
        assert len(jobs) == 160
        assert [j.submit for j in jobs] == sorted(j.submit for j in jobs) and jobs[-1].submit < 8 * 3600
        assert {j.application for j in jobs} <= set(pollux.APPLICATIONS)
        assert all(j.min_gpus == 1 <= j.gpus <= j.max_gpus <= pollux.MAX_GPUS and j.work > 0 for j in jobs)
    assert [len(load_workload(4, load)) for load in (0.5, 1.5, 2.0)] == [80, 240, 320]


def test_elastic_ranges_are_the_artifacts_caps_for_a_fixed_batch() -> None:
    caps = {(j.application, j.batch_size): j.max_gpus for j in load_workload(1)}
    assert caps[("ncf", 32768)] == 1  # Pollux's policies never give ncf a second GPU
    assert caps[("yolov3", 64)] == 16  # 64 / the smallest per-GPU batch measured, 4
    assert caps[("deepspeech2", 320)] == 32  # 320 / 10
    assert caps[("bert", 384)] == caps[("cifar10", 4096)] == 64  # at most 64, as Pollux's policy


def test_curves_rise_where_pollux_measured_them_rising_and_interpolate_between() -> None:
    models = {(j.application, j.batch_size): j for j in load_workload(1) + load_workload(2)}
    for (app, _), job in models.items():
        one_node = [job.throughput(n) for n in range(1, min(4, job.max_gpus) + 1)]
        assert one_node == sorted(one_node), app  # within a node every application speeds up
    imagenet = models["imagenet", 6400].curve.points
    assert [v for _, v in imagenet[:-1]] == sorted(v for _, v in imagenet[:-1])  # rises to 48 GPUs
    bert = models["bert", 384]
    assert bert.throughput(20) == pytest.approx((bert.throughput(16) + bert.throughput(24)) / 2)
    assert bert.throughput(200) == bert.throughput(64)  # flat beyond the last measured count
    with pytest.raises(ValueError, match="1 or more"):
        bert.throughput(0)


def test_a_fixed_size_job_runs_for_the_time_worked_out_by_hand() -> None:
    job = next(j for j in load_workload(1) if (j.application, j.gpus, j.batch_size) == ("bert", 16, 384))
    # bert's 384 on 16 GPUs: 24 per GPU, above the 12 one GPU takes, so 2 passes of 12.
    # Its step time on 4 full nodes at 12 per GPU (bert_step_times: 4444,12,…) and one more
    # compute pass (step - sync):
    step, sync = 1.8881946355104446, 0.9953583183288576
    seconds_per_step = step + (step - sync)
    # Two epochs, ending at progress 7387 and 14774 (steps at batch 12: the smallest ends of
    # every batch size's run); a step of 384 = 32 x 12 makes (var + sqr) / (var / 32 + sqr)
    # of it, with the gradient statistics of batch 384 in that epoch (bert_validation):
    gains = [(var + sqr) / (var / 32 + sqr) for sqr, var in
             ((6509198881259.403, 6086044601707605.0), (43032304393.29889, 45868579275033.31))]
    steps = 7387.0 / gains[0] + (14774.0 - 7387.0) / gains[1]
    assert job.duration(16) == pytest.approx(steps * seconds_per_step, rel=1e-12)
    assert job.duration(16) == pytest.approx(1324, abs=1)  # the artifact's simulator: 1324 s
    assert job.work == pytest.approx(steps * 384)
    assert job.fixed() == TraceJob(job.job_id, job.submit, job.duration(16), 16)


def test_a_job_that_never_waits_ends_when_pollux_s_own_tiresias_run_ended_it() -> None:
    # The first job of each workload finds the cluster empty: in the artifact's simulator it
    # starts at the next 60 s scheduling tick, stalls 30 s, then runs its duration (which the
    # artifact rounds to whole seconds each epoch: 100 epochs of cifar10 add up to 2 %).
    for load in (1.0, 2.0):
        for number in pollux.WORKLOADS:
            first = load_workload(number, load)[0]
            tick = math.ceil(first.submit / pollux.SCHEDULING_INTERVAL_S) * pollux.SCHEDULING_INTERVAL_S
            modelled = tick - first.submit + pollux.RESCALE_DELAY_S + first.duration(first.gpus)
            published = pollux.published_job_jcts("tiresias", load, number)[first.name]
            assert modelled == pytest.approx(published, rel=0.025), (load, number, first.name)
    assert len(pollux.published_job_jcts("pollux", 2.0, 8)) == 320
    with pytest.raises(ValueError, match="no published JCTs for 'pollux' on workload 9"):
        pollux.published_job_jcts("pollux", 1.0, 9)


def test_unknown_or_hostile_application_names_are_refused_with_the_choices(tmp_path: Path) -> None:
    for name in ("resnet", "../../../etc/passwd", "", "BERT"):
        with pytest.raises(ValueError, match="unknown Pollux application .*bert, cifar10, deepspeech2"):
            application(name)
    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\nx-0,0,cifar10,2,256\ny-1,5,../ncf,1,256\n")
    with pytest.raises(ValueError, match=r"w\.csv:3: unknown Pollux application '\.\./ncf'"):
        load_workload(workload)
    workload.write_text("name,time,application,num_replicas,batch_size\nx-0,0,yolov3,32,64\n")
    with pytest.raises(ValueError, match=r"w\.csv:2: 32 GPUs .* yolov3 at batch 64 runs on 1 to 16"):
        load_workload(workload)
    workload.write_text("name,time,application,num_replicas,batch_size\nx-0,0,cifar10,1,99999\n")
    with pytest.raises(ValueError, match=r"w\.csv:2: cifar10: batch size 99999 is outside the measured 128\.\.4096"):
        load_workload(workload)
    workload.write_text("name,time,application,gpus\n")
    with pytest.raises(ValueError, match="missing column"):
        load_workload(workload)
    for number, load in ((9, 1.0), (1, 3.0)):
        with pytest.raises(ValueError, match="workloads are 1-8 at loads 0.5, 1.0, 1.5, 2.0"):
            load_workload(number, load)


def test_a_philly_job_scales_linearly_and_runs_its_trace_duration_at_its_size() -> None:
    job = linear_job(TraceJob(7, 100.0, 3600.0, 4, "vc1"))
    assert (job.min_gpus, job.gpus, job.max_gpus, job.vc) == (1, 4, 8, "vc1")
    assert job.duration(4) == pytest.approx(3600) and job.duration(1) == pytest.approx(4 * 3600)
    assert job.duration(8) == pytest.approx(1800) and job.duration(16) == pytest.approx(1800)
    assert linear_job(TraceJob(1, 0, 60, 48)).max_gpus == 64
    assert linear_job(TraceJob(1, 0, 60, 128)).max_gpus == 128  # never below what it asked
    with pytest.raises(ValueError, match="below the 4"):
        linear_job(TraceJob(1, 0, 60, 4), max_gpus=2)
    with pytest.raises(ValueError, match="starts at 1 GPU and ascends"):
        ThroughputCurve(((2, 1.0), (1, 2.0)))


def test_pollux_published_mean_jcts_are_at_hand() -> None:
    assert [pollux.published_mean_jct(p) for p in ("pollux", "tiresias", "optimus")] == [2751.1, 4038.2, 5681.9]
    assert pollux.published_mean_jct("pollux", 2.0) > pollux.published_mean_jct("pollux", 0.5)
    with pytest.raises(ValueError, match="no published mean JCT for 'fifo'"):
        pollux.published_mean_jct("fifo")


def test_the_published_table_default_against_elastic_from_half_over_the_eight_workloads() -> None:
    """docs/benchmarks.md "Elastic jobs on Pollux's workloads": its two headline rows, replayed
    through the live scheduler's code (``benchmarks/bench_elastic.py``'s runs, about 5 s)."""
    from statistics import fmean

    from trainyard.sim.jobs import uniform_cluster
    from trainyard.sim.queue import QueueSim, policy_named
    from trainyard.sim.queue_track import HOUR, report

    rows: dict[bool, list[dict]] = {False: [], True: []}
    for number in range(1, 9):
        jobs = load_workload(number, 1.0)
        for elastic in rows:
            replayed = [pollux.as_trace_job(j, elastic, "half" if elastic else "asked") for j in jobs]
            nodes = uniform_cluster(pollux.CLUSTER_NODES, pollux.GPUS_PER_NODE)
            rows[elastic].append(report(QueueSim(nodes, replayed, policy_named("default"), tick=60.0,
                                                 resize_cost=30.0).run()))
    table = {elastic: [round(fmean(r[k] for r in runs) * HOUR) for k in ("avg_jct_h", "p99_queueing_h", "makespan_h")]
             for elastic, runs in rows.items()}
    assert all(r["jobs"] == 160 for runs in rows.values() for r in runs)
    assert table[False] == [4256, 41448, 90845]  # default, fixed sizes
    assert table[True] == [3567, 13220, 69373]  # elastic from half the size asked
