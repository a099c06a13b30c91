"""Placement scorers: the registry, topology-aware packing and FGD."""

from __future__ import annotations

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
