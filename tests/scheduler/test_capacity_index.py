"""The capacity index files a changed node again only when it is next read
(``Capacity._flush``), and FGD remembers each node's answer while the node is unchanged
(``Fgd._visits``): both must answer exactly as if nothing were remembered, through any
sequence of changes, undone changes and questions (the speed of a cycle relies on them,
and its decisions must not change)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Capacity, FreeNode, Tentative
from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.quota import job_owner
from trainyard.scheduler.scorers.base import GangProgress
from trainyard.scheduler.scorers.fgd_cpu import FgdCpu
from trainyard.scheduler.snapshot import (
    GpuShare,
    GpuSlot,
    NodeState,
    PendingJob,
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
        elif what == "back" and taken:
            capacity.give_back(taken.pop())
        elif what in ("take", "try"):
            placement = _placement(node, gpu_pos, share, cpu)
            tentative = Tentative()
            capacity.take(placement, tentative)
            if what == "try":
                tentative.discard()
            else:
                taken.append(placement)
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
        assert (remembered is None) == (fresh is None)
        if remembered is None or fresh is None:
            continue
        assert remembered[0].name == fresh[0].name and remembered[1] == fresh[1]
        node, fit = remembered
        placement = TaskPlacement("w", 0, node.name, tuple(fit.devices), task.cpu_milli, task.memory_mb)
        attempt = Tentative()
        ledger.allocate(job_owner(job), placement, fit.binding, attempt)
        if not keep:
            attempt.discard()  # a tried placement undone: the node is as it was, its version not

