"""The queueing track with borrowing, VC weights and fair share (issue 30)."""

from __future__ import annotations

import argparse
import csv
import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from sim_data import PHILLY

from trainyard.cli.main import main
from trainyard.scheduler.snapshot import SchedulerConfig, VirtualCluster
from trainyard.sim.jobs import TraceJob, load_philly, load_vc_nodes, parse_time, uniform_cluster, window
from trainyard.sim.queue import POLICIES, QueuePolicy, QueueResult, QueueSim, policy_named, vc_quotas, vc_settings
from trainyard.sim.queue_track import report, run_queue_command
from trainyard.sim.traces import PHILLY_VC_NODES, trace_file

# The per-job results (id, first start, end, preemptions, suspensions) of the simulator
# before borrowing and fair share (commit 434734f) on ``philly_slice``: sha256, 16 digits.
TODAY_DIGEST = "aa1bee5d8d69b5ea"


def rows(result: QueueResult) -> list[tuple[int, float | None, float | None, int, int]]:
    return [(o.job.job_id, o.first_start, o.end, o.preemptions, o.suspensions)
            for o in sorted(result.outcomes.values(), key=lambda o: o.job.job_id)]


def digest(result: QueueResult) -> str:
    text = "\n".join(",".join(str(v) for v in row) for row in rows(result))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def philly_slice() -> tuple[list[TraceJob], tuple[VirtualCluster, ...]]:
    """Philly's first 150 jobs of 2017-10-09 with Philly's VC quotas on 8 x 8 GPUs: VCs queue."""
    jobs = window(load_philly(PHILLY), parse_time("2017-10-09"), parse_time("2017-10-09T06:00"))[:150]
    return jobs, vc_quotas(jobs, 64, load_vc_nodes(trace_file(*PHILLY_VC_NODES)))


def test_with_borrowing_and_fair_share_off_every_job_runs_as_before_them(
        philly_slice: tuple[list[TraceJob], tuple[VirtualCluster, ...]]) -> None:
    jobs, vcs = philly_slice
    flags_off = QueueSim(uniform_cluster(8, 8), jobs, policy_named("default", borrowing=False, fair_share_half_life=0),
                         vcs=vcs, tick=60.0).run()
    config = replace(SchedulerConfig(), borrowing=False, fair_share_half_life=0)
    configured = QueueSim(uniform_cluster(8, 8), jobs, QueuePolicy("default", config), vcs=vcs, tick=60.0).run()
    assert rows(flags_off) == rows(configured)
    assert digest(flags_off) == TODAY_DIGEST
    assert flags_off.borrowed_starts == flags_off.reclaims == 0
    # The slice is one where borrowing matters: VCs over their quota use others' idle GPUs.
    on = QueueSim(uniform_cluster(8, 8), jobs, policy_named("default"), vcs=vcs, tick=60.0).run()
    assert on.borrowed_starts > 0 and report(on)["avg_queueing_h"] < report(flags_off)["avg_queueing_h"]


def test_the_scheduler_defaults_are_on_and_the_flags_turn_them_off() -> None:
    assert POLICIES["default"].config.borrowing and POLICIES["default"].config.fair_share_half_life > 0
    off = policy_named("easy", borrowing=False, fair_share_half_life=0).config
    assert (off.borrowing, off.fair_share_half_life, off.timeshare) == (False, 0, False)
    with pytest.raises(ValueError, match="--fair-share-half-life must be >= 0 seconds"):
        policy_named("default", fair_share_half_life=-1)


def test_borrowing_shortens_a_vcs_wait_and_the_lender_still_starts_within_the_grace() -> None:
    # b has two 8-GPU jobs and a quota of 8; a's 8 GPUs are idle until its job comes.
    vcs = (VirtualCluster("a", {"gpu": 8}), VirtualCluster("b", {"gpu": 8}))
    jobs = [TraceJob(1, 0.0, 10_000.0, 8, "b"), TraceJob(2, 0.0, 10_000.0, 8, "b"),
            TraceJob(3, 1_000.0, 1_000.0, 8, "a")]
    grace = 30.0

    def run(borrowing: bool) -> QueueSim:
        # (a slice longer than the jobs: b's jobs do not take turns)
        policy = policy_named("default", time_slice=100_000.0, borrowing=borrowing)
        sim = QueueSim(uniform_cluster(2, 8), jobs, policy, vcs=vcs, grace=grace)
        sim.run()
        return sim

    off, on = run(False).result.outcomes, run(True)
    assert off[2].first_start == 10_000.0 and off[3].first_start == 1_000.0
    outcomes = on.result.outcomes
    assert outcomes[2].first_start == 0.0 and outcomes[2].borrowed_starts >= 1
    # The lender's job reclaims its GPUs: b's borrowed job is suspended, a's starts once it stopped.
    assert outcomes[3].first_start is not None and outcomes[3].first_start <= 1_000.0 + grace
    assert (outcomes[2].reclaims, outcomes[2].suspensions, on.result.reclaim_suspensions) == (1, 1, 1)
    assert outcomes[2].jct < off[2].jct
    summary = report(on.result)
    assert (summary["borrowed_jobs"], summary["reclaimed_jobs"]) == (1, 1)
    assert summary["vcs"]["b"]["mean_borrowed_gpus"] > 0 and summary["vcs"]["a"]["mean_borrowed_gpus"] == 0


def test_a_vc_over_its_weighted_share_is_reclaimed_for_fair_share_once_its_work_ran_a_slice() -> None:
    # 24 GPUs, 16 promised: a borrows the other 8 (in 1-GPU jobs) at once; b (weight 2)
    # wants to borrow as many later.
    jobs = [TraceJob(1, 0.0, 50_000.0, 8, "a"), TraceJob(2, 0.0, 50_000.0, 8, "b")]
    jobs += [TraceJob(10 + i, 0.0, 50_000.0, 1, "a") for i in range(8)]
    jobs += [TraceJob(20 + i, 100.0, 50_000.0, 1, "b") for i in range(8)]
    policy = policy_named("default", time_slice=1_200.0)

    def borrowed_by_b_at_the_slice(weight: float) -> int:
        vcs = vc_settings((VirtualCluster("a", {"gpu": 8}), VirtualCluster("b", {"gpu": 8})), weights={"b": weight})
        # (none suspendable: a's borrowed jobs are requeued)
        outcomes = QueueSim(uniform_cluster(3, 8), jobs, policy, vcs=vcs, suspendable="none").run().outcomes
        # Nothing ends before 50,000 s: only the wake-up at the end of a's slice lets b in.
        assert all(outcomes[20 + i].first_start in (1_200.0, 50_000.0) for i in range(8))
        taken = sum(outcomes[20 + i].first_start == 1_200.0 for i in range(8))
        assert sum(outcomes[10 + i].reclaims for i in range(8)) == taken
        return taken

    # b takes until a's share without the next job would fall below b's with it (Kueue's
    # rule, so the GPUs do not go back): 5 of 8 at weight 2 (a 3 : b 2.5), 4 at weight 1.
    assert borrowed_by_b_at_the_slice(2.0) == 5
    assert borrowed_by_b_at_the_slice(1.0) == 4


def test_fair_share_lets_a_light_user_go_before_a_heavy_users_queue() -> None:
    jobs = [TraceJob(1, 0.0, 1_000.0, 8, user="heavy"), TraceJob(2, 10.0, 1_000.0, 8, user="heavy"),
            TraceJob(3, 20.0, 1_000.0, 8, user="heavy"), TraceJob(4, 30.0, 1_000.0, 8, user="light")]

    def starts(half_life: float) -> dict[int, float | None]:
        sim = QueueSim(uniform_cluster(1, 8), jobs, policy_named("default", fair_share_half_life=half_life),
                       suspendable="none")
        return {i: o.first_start for i, o in sim.run().outcomes.items()}

    assert starts(0) == {1: 0.0, 2: 1_000.0, 3: 2_000.0, 4: 3_000.0}  # submit order
    assert starts(3_600.0) == {1: 0.0, 4: 1_000.0, 2: 2_000.0, 3: 3_000.0}


def namespace(**changes: object) -> argparse.Namespace:
    args = dict(trace="philly", jobs=None, cluster="8x8", policy="default", suspendable="all", suspend_cost=120.0,
                time_slice=None, start="2017-10-09", end="2017-10-09T01:00", load=1.0, max_jobs=40,
                vc_quotas="philly", tick=60.0, out=None, json=True, borrowing=None, fair_share_half_life=None,
                vc_weights=None, borrow_limit=None, lend_limit=None)
    args.update(changes)
    return argparse.Namespace(**args)


def test_the_command_sets_weights_and_limits_per_vc_and_writes_borrowing_per_job(tmp_path: Path) -> None:
    out = tmp_path / "jobs.csv"
    summary = run_queue_command(namespace(vc_weights="6214e9=2,11cb48=0.5", borrow_limit="6214e9=4",
                                          lend_limit="b436b2=0", out=out))
    settings = summary["vc_settings"]
    assert (settings["6214e9"]["weight"], settings["6214e9"]["borrow_limit"]) == (2.0, 4)
    assert (settings["11cb48"]["weight"], settings["b436b2"]["lend_limit"]) == (0.5, 0)
    assert summary["borrowing"] is True and summary["fair_share_half_life_s"] == 604_800.0
    assert all(row["mean_borrowed_gpus"] <= 4 + 1e-9 for vc, row in summary["vcs"].items() if vc == "6214e9")
    with open(out) as f:
        table = list(csv.DictReader(f))
    assert {"borrowed_starts", "reclaims"} <= set(table[0])


@pytest.mark.parametrize(("flags", "message"), [
    (["--vc-weights", "6214e9=2"], "need --vc-quotas"),
    (["--vc-quotas", "--vc-weights", "6214e9"], "--vc-weights: '6214e9' is not VC=VALUE with VALUE a number"),
    (["--vc-quotas", "--borrow-limit", "6214e9=1.5"], "--borrow-limit: '6214e9=1.5' is not VC=VALUE"),
    (["--fair-share-half-life", "nan"], "--fair-share-half-life must be >= 0 seconds"),
])
def test_sim_queue_refuses_borrowing_options_that_make_no_sense(
        flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "queue", "--cluster", "8x8", *flags]) == 2  # before loading any trace
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("settings", "message"), [
    ({"lend_limits": {"nosuch": 1}}, "--lend-limit: no VC 'nosuch' has a quota; the VCs are: a, b"),
    ({"weights": {"a": 0.0}}, "--vc-weights: a's weight must be a number > 0"),
    ({"borrow_limits": {"b": -1}}, "--borrow-limit: b's limit must be a whole number of GPUs >= 0"),
])
def test_vc_settings_refuse_an_unknown_vc_and_values_out_of_range(settings: dict[str, dict[str, float]],
                                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        vc_settings((VirtualCluster("a", {"gpu": 8}), VirtualCluster("b", {"gpu": 8})), **settings)  # type: ignore[arg-type]
