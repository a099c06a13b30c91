"""Placement scorers: the registry, topology-aware packing and FGD."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scheduler_world import job, node

from trainyard.core.settings import Settings
from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import DEFAULT_SCORER, SchedulerConfig, Snapshot, WorkloadClass
from trainyard.sim.policies import scorer_name


def placed(nodes, pending, scorer: str, **config):
    decisions = schedule(Snapshot(tuple(nodes), tuple(pending), config=SchedulerConfig(scorer=scorer, **config)))
    return {s.job_id: [(p.node, tuple(g.index for g in p.gpus)) for p in s.placements] for s in decisions.starts}


def test_the_registry_lists_every_scorer_and_an_unknown_one_fails_loudly() -> None:
    names = ["bestfit", "bestfit-cpu-gpu", "clustering", "dotprod", "fgd", "fgd-cpu", "packing", "random", "topology"]
    assert sorted(SCORERS) == names
    with pytest.raises(ValueError, match="unknown scorer 'magic'; the scorers are: " + ", ".join(names)):
        schedule(Snapshot((node("a"),), (job(1, 1000),), config=SchedulerConfig(scorer="magic")))


SPLIT_GROUPS = node("a", 8, groups=2, used={1: 1000, 2: 1000})  # free: 0, 3 | 4, 5, 6, 7


@pytest.mark.parametrize(
    ("scorer", "gpus"),
    [
        pytest.param("bestfit", (0, 3, 4, 5), id="best-fit takes the lowest free indices"),
        pytest.param("topology", (4, 5, 6, 7), id="topology keeps a 4-GPU task in one PCIe group"),
        pytest.param(DEFAULT_SCORER, (4, 5, 6, 7), id="the default keeps a 4-GPU task in one PCIe group"),
    ],
)
def test_a_multi_gpu_task_within_one_gpu_group(scorer: str, gpus: tuple[int, ...]) -> None:
    assert placed([SPLIT_GROUPS], [job(1, 4000)], scorer)[1] == [("a", gpus)]


@pytest.mark.parametrize(
    ("scorer", "nodes"),
    [
        pytest.param("bestfit", ["b", "a"], id="best-fit puts each task on the fullest node"),
        pytest.param("topology", ["a", "a"], id="topology keeps a gang on the fewest nodes"),
        pytest.param(DEFAULT_SCORER, ["a", "a"], id="the default keeps a gang on the fewest nodes"),
    ],
)
def test_a_gang_on_the_fewest_nodes(scorer: str, nodes: list[str]) -> None:
    cluster = [node("a"), node("b", used={i: 1000 for i in range(4)})]
    assert [n for n, _ in placed(cluster, [job(1, 4000, 4000)], scorer)[1]] == nodes


@pytest.mark.parametrize(
    ("scorer", "nodes"),
    [
        pytest.param("bestfit", ["a", "b"], id="best-fit ignores racks"),
        pytest.param("topology", ["a", "c"], id="topology keeps a multi-node gang in one rack"),
        pytest.param(DEFAULT_SCORER, ["a", "c"], id="the default keeps a multi-node gang in one rack"),
    ],
)
def test_a_multi_node_gang_in_one_rack(scorer: str, nodes: list[str]) -> None:
    cluster = [node("a", rack="r1"), node("b", rack="r2"), node("c", rack="r1")]
    assert sorted(n for n, _ in placed(cluster, [job(1, 8000, 8000)], scorer)[1]) == nodes


def test_the_controller_and_the_simulator_have_one_default_scorer() -> None:
    from trainyard.api.server import scheduler_config

    assert scheduler_config(Settings()).scorer == SchedulerConfig().scorer == DEFAULT_SCORER
    # and one time-sharing default, which settings may change; the two differences: `yard up`
    # bounds the jobs a cycle starts, the simulator does not (a bounded cycle's starts are the
    # unbounded one's first: docs/scheduling.md), and holds an elastic job's growth back a
    # minute after a resize, where the simulator grows at once (its tables are without it)
    assert replace(scheduler_config(Settings()), max_starts=0, grow_interval=0.0) == SchedulerConfig()
    assert scheduler_config(Settings()).max_starts == 500 and SchedulerConfig().max_starts == 0
    assert scheduler_config(Settings()).grow_interval == 60.0 and SchedulerConfig().grow_interval == 0.0
    changed = scheduler_config(Settings(scheduler_timeshare=False, scheduler_time_slice_seconds=600))
    assert (changed.timeshare, changed.time_slice) == (False, 600.0)
    moving = scheduler_config(Settings(scheduler_moves_per_hour=6, scheduler_moves_per_cycle=2))
    assert (moving.moves_per_hour, moving.moves_per_cycle) == (6, 2)  # consolidation: off unless set
    assert scorer_name("default") == DEFAULT_SCORER
    assert DEFAULT_SCORER in SCORERS


def test_the_default_prefers_one_gpu_group_on_another_node_to_a_tighter_split_fit() -> None:
    # Node a's four free GPUs are split 2 + 2 across its PCIe groups: FGD (and best fit)
    # fill it, straddling the boundary; the default takes one whole group of node c.
    split = node("a", 8, groups=2, used={0: 1000, 1: 1000, 4: 1000, 5: 1000})
    cluster = [split, node("c", 8, groups=2)]
    assert placed(cluster, [job(1, 4000)], "fgd")[1] == [("a", (2, 3, 6, 7))]
    assert placed(cluster, [job(1, 4000)], DEFAULT_SCORER)[1] == [("c", (0, 1, 2, 3))]


def test_fgd_puts_a_shared_task_where_it_fragments_the_expected_workload_least() -> None:
    # Half-GPU tasks are what is expected. Best-fit fills the fuller device (0.5 free) and
    # strands a quarter of it; FGD uses the emptier one (0.75 free), which keeps 0.5 free.
    cluster = [node("a", 1, used={0: 250}), node("b", 1, used={0: 500})]
    workload = (WorkloadClass(500),)
    assert placed(cluster, [job(1, 250)], "bestfit")[1] == [("b", (0,))]
    assert placed(cluster, [job(1, 250)], "fgd", workload=workload)[1] == [("a", (0,))]


def test_fgd_learns_the_expected_workload_from_the_pending_jobs() -> None:
    # Mostly 2-GPU tasks are waiting: best-fit breaks node c's only pair of GPUs, FGD
    # takes one of node d's three and leaves a pair on both.
    cluster = [node("c", 2), node("d", 3)]
    pending = [job(1, 1000, at=0.0), job(2, 2000, 2000, 2000, 2000, at=1.0)]
    assert placed(cluster, pending, "bestfit")[1] == [("c", (0,))]
    assert placed(cluster, pending, "fgd")[1] == [("d", (0,))]


# A GPU task of 4 CPUs takes the last GPU of node a (12 CPUs free) or of node b (10 CPUs).
CPU_SHORT = [node("a", 1, cpu=12_000), node("b", 1, cpu=10_000)]
GPU_TASK = WorkloadClass(1000, 1.0, cpu_milli=4000)
CPU_ONLY = WorkloadClass(0, 2.0, cpu_milli=8000)


def test_where_cpu_runs_out_first_the_default_leaves_cpu_that_tasks_can_still_use() -> None:
    # With 8-CPU tasks expected besides, the workload asks 20 CPUs per GPU against the
    # cluster's 11: CPU runs out first. On a, the task leaves 8 CPUs a CPU-only task can use;
    # on b, 6 that no task can. FGD sees no GPU fragment either way: both nodes score the
    # same, and the authors' tie rule takes a, the name that sorts first, not for its CPU.
    assert placed(CPU_SHORT, [job(1, 1000, cpu=4000)], "fgd", workload=(GPU_TASK, CPU_ONLY))[1] == [("a", (0,))]
    assert placed(CPU_SHORT[::-1], [job(1, 1000, cpu=4000)], "fgd", workload=(GPU_TASK, CPU_ONLY))[1] == [("a", (0,))]
    assert placed(CPU_SHORT, [job(1, 1000, cpu=4000)], DEFAULT_SCORER, workload=(GPU_TASK, CPU_ONLY))[1] == [
        ("a", (0,))
    ]


def test_where_gpus_run_out_first_cpu_fragments_are_not_costed() -> None:
    # Fewer 8-CPU tasks expected: 8 CPUs per GPU asked against the cluster's 11. Costed, the
    # CPU fragments would take a again (5.3 CPUs left unusable against b's 6); best fit takes b.
    few_cpu_only = WorkloadClass(0, 0.5, cpu_milli=8000)
    assert placed(CPU_SHORT, [job(1, 1000, cpu=4000)], DEFAULT_SCORER, workload=(GPU_TASK, few_cpu_only))[1] == [
        ("b", (0,))
    ]


def test_cpu_fragments_cost_in_proportion_to_the_gpu_work_the_cpu_cannot_back() -> None:
    from trainyard.scheduler.scorers.fgd_cpu import CPU_FRAGMENT_SCALE, FgdCpu, cpu_fragment_weight

    assert FgdCpu((GPU_TASK, CPU_ONLY), 11.0).cpu_fragments is not None
    assert FgdCpu((GPU_TASK,), 11.0).cpu_fragments is None
    assert FgdCpu((GPU_TASK, CPU_ONLY)).cpu_fragments is None  # the cluster unknown
    # No switch: nothing while the cluster's CPU backs all the GPU work, then a weight that
    # grows smoothly with the share it cannot back (1 − 11/22 = half of it at 22 CPUs per GPU).
    assert cpu_fragment_weight(11.0, 11.0) == 0.0
    assert 0 < cpu_fragment_weight(11.1, 11.0) < 0.01 * CPU_FRAGMENT_SCALE
    assert cpu_fragment_weight(22.0, 11.0) == 0.5 * CPU_FRAGMENT_SCALE
    weights = [cpu_fragment_weight(11.0 + step / 10, 11.0) for step in range(100)]
    assert weights == sorted(weights)


def test_cpu_fragments_are_costed_when_the_gpu_tasks_ask_no_cpu() -> None:
    gpu_only = WorkloadClass(1000, 1.0)
    assert placed(CPU_SHORT, [job(1, 1000, cpu=4000)], DEFAULT_SCORER, workload=(gpu_only, CPU_ONLY))[1] == [
        ("a", (0,))
    ]


def test_the_default_learns_that_cpu_runs_out_first_from_the_pending_cpu_only_jobs() -> None:
    pending = [job(1, 1000, cpu=4000), job(2, 0, cpu=8000), job(3, 0, cpu=8000)]
    assert placed(CPU_SHORT, pending, DEFAULT_SCORER)[1] == [("a", (0,))]
    # One 7-CPU job besides: 11 CPUs per GPU asked, as much as the cluster has. (Costed, the
    # CPU fragments would take a: 4 CPUs left unusable against b's 6.)
    assert placed(CPU_SHORT, [pending[0], job(2, 0, cpu=7000)], DEFAULT_SCORER)[1] == [("b", (0,))]


def test_the_cpu_the_pending_jobs_ask_is_counted_in_full_not_from_their_mix() -> None:
    # The mix keeps a GPU kind's least CPU: counted from it, 2 × 2 + 8 + 8 = 20 CPUs for 2
    # GPUs, 10 per GPU, less than the cluster's 11. The tasks ask 2 + 30 + 8 + 8 = 48, 24 per
    # GPU: CPU runs out first, though not on a cluster of 60 CPUs per GPU.
    from trainyard.scheduler.scorers.fgd_cpu import FgdCpu

    pending = (job(1, 1000, cpu=2000), job(2, 1000, cpu=30_000), job(3, 0, cpu=8000), job(4, 0, cpu=8000))
    rich = [node("a", 1, cpu=60_000), node("b", 1, cpu=60_000)]
    assert FgdCpu.for_snapshot(Snapshot(tuple(CPU_SHORT), pending)).cpu_fragments is not None
    assert FgdCpu.for_snapshot(Snapshot(tuple(rich), pending)).cpu_fragments is None


def test_fgd_measures_gpu_fragments_against_gpu_tasks_only() -> None:
    from trainyard.scheduler.scorers.fgd import Fgd

    assert Fgd((GPU_TASK, CPU_ONLY)).classes == Fgd((GPU_TASK,)).classes


def test_how_scarce_a_gpu_model_is_blends_the_default_towards_fgds_weights() -> None:
    from trainyard.scheduler.scorers.fgd_cpu import SCARCE_AT, SCARCE_FROM, FgdCpu, model_pressure, scarcity

    def mix(limited: float) -> tuple[WorkloadClass, ...]:
        return (WorkloadClass(1000, 1.0 - limited), WorkloadClass(1000, limited, gpu_models=("T4",)), CPU_ONLY)

    # T4s are a fifth of the cluster: tasks limited to them asking 5 % of all GPU work ask a
    # quarter of the T4s; the same tasks on a cluster of T4s only ask 5 % of them.
    capacity = {"T4": 20, "V100": 80}
    assert model_pressure(mix(0.0), capacity) == 0.0
    assert model_pressure(mix(0.05), capacity) == pytest.approx(0.25)
    assert model_pressure(mix(0.05), {"T4": 100}) == pytest.approx(0.05)
    assert model_pressure(mix(0.05)) == pytest.approx(0.05)  # capacity unknown: the limited share
    assert scarcity(SCARCE_FROM) == 0.0 and scarcity(SCARCE_AT) == 1.0
    assert scarcity((SCARCE_FROM + SCARCE_AT) / 2) == pytest.approx(0.5)
    blind, half, scarce = (FgdCpu(mix(share), 11.0, capacity=capacity) for share in (0.02, 0.055, 0.2))
    assert (blind.scarce, scarce.scarce) == (0.0, 1.0) and 0 < half.scarce < 1
    # Weights: count × √request where no model is scarce, FGD's count where one is.
    two = WorkloadClass(2000, 1.0)
    assert FgdCpu((two, WorkloadClass(1000, 1.0))).classes[0][1] == pytest.approx(2**0.5 / (1 + 2**0.5))
    scarce_mix = (two, WorkloadClass(1000, 1.0, gpu_models=("T4",)))
    assert FgdCpu(scarce_mix, capacity={"T4": 1, "V100": 1}).classes[0][1] == pytest.approx(0.5)


def test_a_few_tasks_for_a_rare_gpu_model_do_not_move_the_whole_clusters_cost() -> None:
    from trainyard.scheduler.scorers.fgd_cpu import FULL_SHARE, model_pressure, workload_scarcity

    # One task in a hundred asks an A10, and the cluster has 2 A10s in 1,000 GPUs: the A10s
    # are fully asked (pressure 5), but giving them away costs at most 2 GPUs.
    mix = (WorkloadClass(1000, 99.0), WorkloadClass(1000, 1.0, gpu_models=("A10",)))
    rare = {"A10": 2, "V100": 998}
    assert model_pressure(mix, rare) == pytest.approx(5.0)
    assert workload_scarcity(mix, rare) == pytest.approx(0.002 / FULL_SHARE)
    # The same tasks where A10s are a fifth of the cluster and half asked: scarce in full.
    assert workload_scarcity((WorkloadClass(1000, 90.0), WorkloadClass(1000, 10.0, gpu_models=("A10",))),
                             {"A10": 200, "V100": 800}) == 1.0
    # A model named twice in one limit counts once.
    twice = (WorkloadClass(1000, 1.0, gpu_models=("A10", "A10", "V100")),)
    assert model_pressure(twice, {"A10": 1, "V100": 1}) == pytest.approx(1.0)


@pytest.mark.parametrize("scorer", ["bestfit", "topology", DEFAULT_SCORER])
def test_among_nodes_that_fit_alike_the_ones_holding_the_jobs_data_come_first(scorer: str) -> None:
    cluster = [node("a"), node("b"), node("c", used={0: 1000})]
    wants = replace(job(1, 1000), data_nodes=frozenset({"b"}))
    # c is the better fit (fuller): the data on b never outweighs it.
    assert [n for n, _ in placed(cluster, [wants], scorer)[1]] == ["c"]
    # Between a and b, alike, the data decides.
    assert [n for n, _ in placed(cluster[:2], [wants], scorer)[1]] == ["b"]
    assert [n for n, _ in placed(cluster[:2], [job(1, 1000)], scorer)[1]] == ["a"]
