"""The capacity index files a changed node again only when it is next read
(``Capacity._flush``), FGD remembers each node's answer while the node is unchanged
(``Fgd._visits``), and scorers keep every node's key per kind of task from the journal of
changed nodes (``Standing``): all must answer exactly as if nothing were remembered, through
any sequence of changes, undone changes and questions (the speed of a cycle relies on them,
and its decisions must not change)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Capacity, FreeNode, Tentative
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.scorers.base import Choice, GangProgress
from trainyard.scheduler.scorers.fgd_cpu import FgdCpu
from trainyard.scheduler.scorers.registry import scorer_for
from trainyard.scheduler.snapshot import (
    GpuShare,
    GpuSlot,
    NodeState,
    PendingJob,
    SchedulerConfig,
    Snapshot,
    TaskPlacement,
    TaskRequest,
    VirtualCluster,
)

GPU_REQUESTS = (0, 250, 500, 1000, 2000, 4000)


def _nodes(count: int) -> tuple[NodeState, ...]:
    return tuple(
        NodeState(f"n{i}", 16_000, 65_536, tuple(GpuSlot(g, "A100" if i % 3 else "V100", 40960, 0, str(g // 2))
                                                 for g in range(4)))
        for i in range(count)
    )


def _placement(node: FreeNode, gpu: int, share: int, cpu: int) -> TaskPlacement:
    index = node.gpu_index[gpu]
    return TaskPlacement("w", 0, node.name, (GpuShare(index, share),) if share else (), cpu, 1024)


def _change(capacity: Capacity, taken: list[TaskPlacement], what: str, node: FreeNode, gpu: int, share: int,
            cpu: int) -> None:
    """"take" keeps the change, "try" takes and undoes it, "back" gives back the latest kept."""
    if what == "back":
        if taken:
            capacity.give_back(taken.pop())
        return
    placement = _placement(node, gpu, share, cpu)
    tentative = Tentative()
    capacity.take(placement, tentative)
    if what == "try":
        tentative.discard()
    else:
        taken.append(placement)


def _expected(capacity: Capacity, task: TaskRequest, emptiest_first: bool) -> list[str]:
    """The index's answer worked out from scratch: every schedulable node that may fit the
    task's GPUs, in best-fit order."""
    least_whole = task.gpu_milli // MILLI if task.gpu_milli >= MILLI else 0
    least_sum = task.gpu_milli if 0 < task.gpu_milli < MILLI else -(1 << 62)
    nodes = [
        n for n in capacity.nodes.values()
        if n.schedulable and n.whole >= least_whole and n.gpu_sum >= least_sum
        and (task.gpu_milli <= 0 or not task.gpu_models or n.only_model in task.gpu_models)
    ]
    nodes.sort(key=lambda n: (n.gpu_sum, n.cpu_milli, n.name), reverse=emptiest_first)
    return [n.name for n in nodes]


# Steps: (what, node, device, share, CPU): "take" keeps the change, "try" takes and undoes
# it before the next question, "ask" asks the index.
steps = st.lists(
    st.tuples(st.sampled_from(("take", "try", "ask", "back")), st.integers(0, 7), st.integers(0, 3),
              st.sampled_from((0, 250, 500, 1000)), st.sampled_from((0, 1000, 2000, 4000))),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(steps, st.sampled_from(GPU_REQUESTS), st.sampled_from(((), ("A100",))), st.booleans())
def test_the_index_answers_as_if_refiled_at_every_change(steps, gpu, models, emptiest_first) -> None:
    nodes = [FreeNode.from_state(n) for n in _nodes(8)]
    capacity = Capacity(nodes)
    task = TaskRequest("w", 0, gpu, 1000, 1024, gpu_models=models)
    taken: list[TaskPlacement] = []
    for what, n, gpu_pos, share, cpu in steps:
        node = nodes[n]
        if what == "ask":
            found = [x.name for x in capacity.candidates(task, emptiest_first=emptiest_first)]
            assert found == _expected(capacity, task, emptiest_first)
        else:
            _change(capacity, taken, what, node, gpu_pos, share, cpu)
    found = [x.name for x in capacity.candidates(task, emptiest_first=emptiest_first)]
    assert found == _expected(capacity, task, emptiest_first)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(GPU_REQUESTS[1:]), st.booleans()), min_size=1, max_size=12),
       st.booleans())
def test_fgd_chooses_as_a_fresh_scorer_would_after_any_changes(tasks, in_vcs) -> None:
    """One scorer that has seen every earlier task (and remembers what it saw) picks the
    same node and devices as a scorer built afresh for each task: without rules (answers
    by node state) and under a VC's quota and cells (a window of bounds)."""
    vcs = (VirtualCluster("a", {"A100": 12, "V100": 4}),) if in_vcs else ()
    pending = tuple(
        PendingJob(i, 0, float(i), (TaskRequest("w", 0, g, 1000, 1024),), f"u{i % 2}", "a" if in_vcs else "default")
        for i, (g, _) in enumerate(tasks)
    )
    snapshot = Snapshot(_nodes(6), pending, vcs=vcs)
    ledger = Ledger(snapshot)
    kept = FgdCpu.for_snapshot(snapshot)
    for job, (_, keep) in zip(pending, tasks, strict=True):
        task = job.tasks[0]
        access = Access(ledger, job)
        remembered = kept.choose(task, access, GangProgress(job, remaining_gpu=task.gpu_milli))
        fresh = FgdCpu.for_snapshot(snapshot).choose(task, access, GangProgress(job, remaining_gpu=task.gpu_milli))
        _agree_then_place(ledger, job, keep, remembered, fresh)


def _agree_then_place(ledger: Ledger, job: PendingJob, keep: bool, remembered: Choice | None,
                      other: Choice | None) -> None:
    """Both choices are the same node and devices; the remembered one is then placed, or
    (not ``keep``) tried and undone: the node is as it was, its version not."""
    assert (remembered is None) == (other is None)
    if remembered is None or other is None:
        return
    assert remembered[0].name == other[0].name and remembered[1] == other[1]
    node, fit = remembered
    task = job.tasks[0]
    placement = TaskPlacement("w", 0, node.name, tuple(fit.devices), task.cpu_milli, task.memory_mb)
    attempt = Tentative()
    ledger.allocate(job_owner(job), placement, fit.binding, attempt)
    if not keep:
        attempt.discard()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("take", "try", "back")), st.integers(0, 7), st.integers(0, 3),
                          st.sampled_from((0, 250, 500, 1000)), st.sampled_from((0, 1000, 2000, 4000, 8000))),
                min_size=1, max_size=30))
def test_what_the_index_offers_and_the_first_host_follow_every_change(changes) -> None:
    """``Capacity.offers`` is the index's own test, and ``first_host`` (kept per kind of task
    from the journal of changed nodes) the first node in best-fit order whose CPU and memory
    host a task without GPUs, after every change, undone change and give-back (n5 cordoned;
    a journal of 5 changes, so that a reader also finds it has forgotten what it missed)."""
    nodes = [FreeNode.from_state(replace(n, schedulable=n.name != "n5")) for n in _nodes(8)]
    capacity = Capacity(nodes, journal_kept=5)
    taken: list[TaskPlacement] = []
    gpu_tasks = [TaskRequest("w", 0, g, 1000, 1024, gpu_models=m) for g in GPU_REQUESTS[1:] for m in ((), ("A100",))]
    cpu_tasks = [TaskRequest("c", 0, 0, need, 1024) for need in (1000, 8000, 12_000, 13_000, 16_000)]
    for what, n, gpu_pos, share, cpu in changes:
        _change(capacity, taken, what, nodes[n], gpu_pos, share, cpu)
        for task in gpu_tasks:
            offered = [x.name for x in nodes if capacity.offers(x, task)]
            assert offered == sorted(x.name for x in capacity.candidates(task))
        for task in cpu_tasks:
            hosts = [x for x in capacity.candidates(task) if x.hosts_cpu_and_memory(task)]
            assert capacity.first_host(task) is (hosts[0] if hosts else None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(GPU_REQUESTS), st.sampled_from((0, 1000, 4000)), st.booleans()),
                min_size=4, max_size=24),
       st.sampled_from(("fgd-cpu", "fgd", "clustering", "packing", "random", "dotprod", "bestfit-cpu-gpu")))
def test_a_kept_standing_picks_what_the_walk_over_every_node_picks(tasks, scorer) -> None:
    """Without quota or cell rules, FGD, the rated scorers and first fit of a task without
    GPUs keep each node's key or rating per kind of task from the nodes changed since
    (``Standing``, ``Bands``): one scorer that has seen every earlier task picks the node and devices
    that a fresh scorer's walk over the nodes in best-fit order picks (a job with data
    nodes, here none of them, takes that walk)."""
    pending = tuple(
        PendingJob(i, 0, float(i), (TaskRequest("w", 0, g, cpu, 1024),), f"u{i % 2}")
        for i, (g, cpu, _) in enumerate(tasks)
    )
    snapshot = Snapshot(_nodes(7), pending, config=SchedulerConfig(scorer=scorer))
    ledger = Ledger(snapshot)
    kept = scorer_for(snapshot)
    for job, (_, _, keep) in zip(pending, tasks, strict=True):
        task = job.tasks[0]
        walker = replace(job, data_nodes=frozenset({"elsewhere"}))
        remembered = kept.choose(task, Access(ledger, job), GangProgress(job, remaining_gpu=task.gpu_milli))
        walked = scorer_for(snapshot).choose(task, Access(ledger, walker),
                                             GangProgress(walker, remaining_gpu=task.gpu_milli))
        _agree_then_place(ledger, job, keep, remembered, walked)
