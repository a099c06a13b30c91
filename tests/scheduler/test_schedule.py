from __future__ import annotations

from dataclasses import replace

import pytest

from trainyard.core.labels import GPU_SHARES_LABEL
from trainyard.scheduler.schedule import never_fits, schedule
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import (
    GpuSlot,
    NodeState,
    PendingJob,
    PendingReason,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
)


def node(name: str, gpus: int = 4, used: dict[int, int] | None = None, cpu: int = 16000) -> NodeState:
    used = used or {}
    return NodeState(name, cpu, 65536, tuple(GpuSlot(i, "A100", 40960, used.get(i, 0)) for i in range(gpus)))


def job(job_id: int, *gpu_milli: int, priority: int = 1, at: float | None = None) -> PendingJob:
    tasks = tuple(TaskRequest("w", i, g, 1000, 1024) for i, g in enumerate(gpu_milli))
    return PendingJob(job_id, priority, at if at is not None else float(job_id), tasks)


def test_higher_priority_goes_first_then_submit_time() -> None:
    decisions = schedule(Snapshot((node("a", 2),), (job(1, 2000), job(2, 2000, priority=0))))
    assert [s.job_id for s in decisions.starts] == [2]
    assert decisions.waits[0].job_id == 1 and decisions.waits[0].position == 1


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    decisions = schedule(Snapshot((node("a", 2), node("b", 1)), (job(1, 2000, 2000),)))
    assert decisions.starts == ()
    assert decisions.waits[0].reason == PendingReason.NO_FIT


def test_a_gang_may_span_nodes() -> None:
    decisions = schedule(Snapshot((node("a", 2), node("b", 2)), (job(1, 2000, 2000),)))
    assert sorted(p.node for p in decisions.starts[0].placements) == ["a", "b"]


def test_a_small_job_is_not_blocked_by_a_big_one_ahead() -> None:
    decisions = schedule(Snapshot((node("a", 4, used={0: 1000, 1: 1000}),), (job(1, 4000), job(2, 1000))))
    assert [s.job_id for s in decisions.starts] == [2]
    # Messages describe the cluster after this cycle's starts: job 2 took one of the two.
    assert "needs 4 GPU in total, 1 free" in decisions.waits[0].message


def test_fractions_share_one_device_and_pack_onto_the_fullest_one() -> None:
    decisions = schedule(Snapshot((node("a", 2, used={1: 500}),), (job(1, 250), job(2, 250))))
    devices = [p.gpus[0].index for s in decisions.starts for p in s.placements]
    assert devices == [1, 1]


def test_whole_gpus_take_only_unshared_devices() -> None:
    decisions = schedule(Snapshot((node("a", 2, used={0: 100}),), (job(1, 2000),)))
    assert decisions.starts == ()


def test_best_fit_prefers_the_fuller_node() -> None:
    decisions = schedule(Snapshot((node("a", 4), node("b", 4, used={0: 1000, 1: 1000})), (job(1, 1000),)))
    assert decisions.starts[0].placements[0].node == "b"


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_retry_after_a_platform_fault_goes_elsewhere_when_it_fits_elsewhere(scorer: str) -> None:
    # Best fit would pick the fuller node b; its last attempt was lost there (a node down,
    # a port held there): the retry goes to a, and back to b only when nothing else fits.
    nodes = (node("a", 4), node("b", 4, used={0: 1000, 1: 1000}))
    config = SchedulerConfig(scorer=scorer)
    retry = replace(job(1, 1000), avoid_nodes=frozenset({"b"}))
    assert schedule(Snapshot(nodes, (retry,), config=config)).starts[0].placements[0].node == "a"
    full_a = (node("a", 4, used={i: 1000 for i in range(4)}), nodes[1])
    assert schedule(Snapshot(full_a, (retry,), config=config)).starts[0].placements[0].node == "b"


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_fraction_goes_only_to_a_node_whose_gpus_can_be_shared(scorer: str) -> None:
    # On Slurm a node without shard GRES says so (docs/slurm.md): a fraction placed there
    # would fail at launch; best fit would pick the fuller node a.
    unshared = replace(node("a", 4, used={0: 1000}), labels={GPU_SHARES_LABEL: "false"})
    shared = replace(node("b", 4), labels={GPU_SHARES_LABEL: "true"})
    config = SchedulerConfig(scorer=scorer)
    placed = schedule(Snapshot((unshared, shared), (job(1, 500),), config=config)).starts[0].placements[0]
    assert placed.node == "b"
    assert schedule(Snapshot((unshared,), (job(1, 500),), config=config)).starts == ()
    assert schedule(Snapshot((unshared,), (job(2, 1000),), config=config)).starts[0].placements[0].node == "a"


def test_a_fraction_never_fits_where_no_node_with_gpus_can_share_one() -> None:
    """The Slurm backend labels a node whose GPUs have no ``shard`` GRES (docs/slurm.md)."""
    unshared = replace(node("a", 4), labels={GPU_SHARES_LABEL: "false"})
    assert never_fits([unshared, node("cpu", 0)], list(job(1, 500, 1000).tasks)) == [
        "taskRoles.w.resourcePerInstance.gpu: each instance needs a fraction of a GPU, and no node here can share "
        "one (on Slurm: no shard GRES; see docs/slurm.md); ask for whole GPUs"]
    assert never_fits([unshared], list(job(1, 1000).tasks)) == []
    shared = replace(node("b", 4), labels={GPU_SHARES_LABEL: "true"})
    assert never_fits([unshared, shared], list(job(1, 500).tasks)) == []
    assert never_fits([node("c")], list(job(1, 500).tasks)) == []  # no label (the local backend): it can


def test_jobs_that_can_never_fit_are_explained_with_numbers() -> None:
    problems = never_fits([node("a", 4), node("b", 4)], list(job(1, 8000).tasks))
    assert problems == ["taskRoles.w: each instance needs 8 GPU; the largest node has 4"]
    problems = never_fits([node("a", 4)], list(job(1, 4000, 4000).tasks))
    assert problems == ["the job needs 8 GPU in total; the cluster has 4"]
    assert never_fits([node("a", 4)], list(job(1, 4000).tasks)) == []
    assert "has none" in never_fits([node("a", 0)], list(job(1, 500).tasks))[0]
    # Each task fits a node, but all of them together are more than the cluster has.
    problems = never_fits([node("a", 4, cpu=2000)], list(job(1, 0, 1000, 1000).tasks))  # 1 CPU each
    assert problems == ["the job needs 3 CPU in total; the cluster has 2"]
    big = [TaskRequest("w", i, 1000, 1000, 40_000) for i in range(2)]
    assert never_fits([node("a", 4)], big) == ["the job needs 80000 MiB of memory in total; the cluster has 65536 MiB"]


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_gang_starts_when_its_largest_task_would_take_the_only_node_a_smaller_one_fits(scorer) -> None:
    """The 4-GPU task, placed first, fits both nodes; the 2-GPU task needs 2.5 CPU, which
    only a has. Tried again with the task that found no room first, the gang starts."""
    nodes = (
        NodeState("a", 3000, 4096, tuple(GpuSlot(i, "A100", 40960) for i in range(4))),
        NodeState("b", 2000, 4096, tuple(GpuSlot(i, "A100", 40960) for i in range(8))),
    )
    gang = PendingJob(1, 1, 1.0, (TaskRequest("w", 0, 2000, 2500, 0), TaskRequest("w", 1, 4000, 0, 3072)))
    [start] = schedule(Snapshot(nodes, (gang,), config=SchedulerConfig(scorer=scorer))).starts
    assert {p.index: p.node for p in start.placements} == {0: "a", 1: "b"}
