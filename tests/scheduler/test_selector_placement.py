"""Resource expressions in the scheduler: only nodes and GPUs that make the expression true
are used, per node and per device, with labels; why-pending names the clause no node meets."""

from __future__ import annotations

import pytest

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


def node(name: str, *gpus: tuple[str, int], labels: dict[str, str] | None = None, cpu: int = 16000) -> NodeState:
    slots = tuple(GpuSlot(i, model, memory) for i, (model, memory) in enumerate(gpus))
    return NodeState(name, cpu, 65536, slots, labels=labels or {})


def job(job_id: int, gpu_milli: int, selector: str, *, instances: int = 1, **task: object) -> PendingJob:
    tasks = tuple(TaskRequest("w", i, gpu_milli, 1000, 1024, selector=selector, **task)  # type: ignore[arg-type]
                  for i in range(instances))
    return PendingJob(job_id, 1, float(job_id), tasks)


A100 = ("A100", 81920)
V100 = ("V100", 32768)


def placed(snapshot: Snapshot) -> dict[int, list[tuple[str, tuple[int, ...]]]]:
    decisions = schedule(snapshot)
    return {s.job_id: [(p.node, tuple(g.index for g in p.gpus)) for p in s.placements] for s in decisions.starts}


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_job_goes_only_to_nodes_whose_labels_make_its_expression_true(scorer: str) -> None:
    nodes = (node("a", A100, A100), node("b", A100, A100, labels={"ib": "true"}), node("c", A100, A100))
    pending = (job(1, 1000, 'node.labels["ib"] == "true"', instances=2),)
    starts = placed(Snapshot(nodes, pending, config=SchedulerConfig(scorer=scorer)))
    assert sorted(n for n, _ in starts[1]) == ["b", "b"]


@pytest.mark.parametrize("scorer", sorted(SCORERS))
def test_a_job_takes_only_the_devices_its_expression_allows_on_a_mixed_node(scorer: str) -> None:
    nodes = (node("m", V100, A100, V100, A100),)
    starts = placed(Snapshot(nodes, (job(1, 2000, "gpu.memoryMB >= 40000"),), config=SchedulerConfig(scorer=scorer)))
    assert starts[1] == [("m", (1, 3))]
    # a fraction too: it lands on a device the expression allows
    starts = placed(Snapshot(nodes, (job(2, 500, 'gpu.model == "V100" && gpu.index > 0'),),
                             config=SchedulerConfig(scorer=scorer)))
    assert starts[2] == [("m", (2,))]


def test_an_expression_true_nowhere_keeps_the_job_waiting_with_the_clause_no_node_meets() -> None:
    nodes = (node("a", V100, V100), node("b", V100))
    decisions = schedule(Snapshot(nodes, (job(1, 1000, 'gpu.memoryMB >= 40000 && gpu.model in ["A100", "H100"]'),)))
    assert decisions.starts == ()
    wait = decisions.waits[0]
    assert wait.reason == PendingReason.NO_FIT
    assert "w: no node meets gpu.memoryMB >= 40000: the largest GPU has 32768 MiB" in wait.message
    assert wait.short == "w: no node meets its selector"


def test_why_pending_names_the_first_clause_no_node_meets_and_the_node_figure() -> None:
    nodes = (node("a", A100, labels={"ib": "true"}, cpu=8000), node("b", A100, cpu=4000))
    message = schedule(Snapshot(nodes, (job(1, 0, 'node.cpu >= 4.0 && node.cpu > 12.0'),))).waits[0].message
    assert "no node meets node.cpu > 12.0: the largest node has 8 CPUs" in message
    message = schedule(Snapshot(nodes, (job(2, 1000, 'node.labels["ib"] == "false"'),))).waits[0].message
    assert 'no node meets node.labels["ib"] == "false"' in message
    # each clause met somewhere, never together
    message = schedule(Snapshot(nodes, (job(3, 0, 'node.cpu > 6.0 && node.name == "b"'),))).waits[0].message
    assert "each part alone is met by some node, not all together" in message


def test_a_role_without_gpus_is_placed_by_node_attributes_only() -> None:
    nodes = (node("small", cpu=4000), node("big", cpu=32000), node("other", cpu=32000, labels={"zone": "x"}))
    starts = placed(Snapshot(nodes, (job(1, 0, 'node.cpu >= 16.0 && !("zone" in node.labels)'),)))
    assert starts[1] == [("big", ())]


def test_the_shorthands_and_an_expression_both_apply() -> None:
    nodes = (node("a", A100, V100, ("A100", 40960)),)
    pending = (job(1, 1000, "gpu.index != 0", gpu_models=("A100",)),)
    assert placed(Snapshot(nodes, pending))[1] == [("a", (2,))]


def test_submit_refuses_an_expression_no_node_could_ever_meet_unless_it_reads_labels() -> None:
    nodes = [node("a", V100, V100)]
    problems = never_fits(nodes, [TaskRequest("w", 0, 1000, selector="gpu.memoryMB >= 40000")])
    assert problems == ["taskRoles.w.resourcePerInstance.selector: no node meets gpu.memoryMB >= 40000: "
                        "the largest GPU has 32768 MiB"]
    # labels are set live (`yard node label`): the job waits instead of being refused
    assert never_fits(nodes, [TaskRequest("w", 0, 1000, selector='node.labels["ib"] == "true"')]) == []
    # …but a part no label can change is still checked: labelling a node makes no GPU bigger
    mixed = 'node.labels["ib"] == "true" && gpu.memoryMB >= 40000 && node.name != "b"'
    assert never_fits(nodes, [TaskRequest("w", 0, 1000, selector=mixed)]) == problems
    fits = 'node.labels["ib"] == "true" && gpu.memoryMB >= 16000'
    assert never_fits(nodes, [TaskRequest("w", 0, 1000, selector=fits)]) == []
    either = 'node.labels["ib"] == "true" || gpu.memoryMB >= 40000'  # a label may yet satisfy it
    assert never_fits(nodes, [TaskRequest("w", 0, 1000, selector=either)]) == []


def test_a_labelled_node_is_seen_in_the_next_cycle() -> None:
    pending = (job(1, 1000, 'node.labels["ib"] == "true"'),)
    assert placed(Snapshot((node("a", A100),), pending)) == {}
    assert placed(Snapshot((node("a", A100, labels={"ib": "true"}),), pending)) == {1: [("a", (0,))]}


def test_a_job_that_fits_its_nodes_only_when_they_free_up_counts_only_the_selected_gpus() -> None:
    nodes = (node("a", A100, A100, labels={"ib": "true"}), node("b", A100, A100, A100, A100))
    decisions = schedule(Snapshot(nodes, (job(1, 3000, 'node.labels["ib"] == "true"'),)))
    assert decisions.starts == ()
    assert decisions.waits[0].message == "needs 3 selected GPU in total, 2 free"  # b's four do not count
