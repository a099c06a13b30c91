"""The placement track: the FGD paper's protocol run through the live scheduler's placement.

Pods arrive one by one and never leave; each is placed by ``placement.place_gang`` with a
scorer from ``scorers.registry.SCORERS`` — the code ``schedule()`` runs for every job it
starts — or fails and is skipped. What the simulator keeps across pods is one ``Ledger``
(the scheduler's own free-capacity index), as ``schedule()`` keeps it across the jobs of
one cycle: a 10,000-pod run is then one long cycle instead of 10,000 snapshots rebuilt
from scratch, which is what makes a run take seconds. No VCs are configured, so quota and
cell rules admit everything, as in the paper's cluster.

After every pod: *arrived demand* = GPU requests of the pods seen so far ÷ capacity, and
*allocation* = GPUs in use ÷ capacity (milli-GPU). "At k %" is the mean over the pods whose
arrived demand rounds to k %. Fragmentation is FGD's own measure (``Fgd.fragmentation``,
against the pod list's workload), summed over nodes and kept up to date per placement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainyard.core.sharing import GpuSharing
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Ledger
from trainyard.scheduler.placement import place_gang
from trainyard.scheduler.scorers.fgd import Fgd
from trainyard.scheduler.scorers.registry import scorer_for
from trainyard.scheduler.snapshot import NodeState, PendingJob, SchedulerConfig, Snapshot, WorkloadClass
from trainyard.sim.openb import Pod, gpu_capacity

POINTS = 131  # arrived demand 0..130 %
FRACTION_EVERY = 200  # pods between two progress reports (a report costs next to nothing; a pod ~0.5 ms)


@dataclass
class PlacementRun:
    """One run: per pod, the arrived demand and what was allocated and fragmented after it."""

    capacity_milli: int
    arrived: list[int] = field(default_factory=list)  # milli-GPU requested so far
    allocated: list[int] = field(default_factory=list)  # milli-GPU in use
    fragmented: list[float] = field(default_factory=list)  # milli-GPU, FGD's measure
    placed: int = 0
    failed: int = 0

    def curve(self, values: Sequence[float], points: int = POINTS) -> list[float | None]:
        """Mean of ``values`` (as % of capacity) per whole % of arrived demand; None where no pod
        arrived at that level."""
        sums = [0.0] * points
        counts = [0] * points
        for arrived, value in zip(self.arrived, values, strict=True):
            k = math.floor(arrived * 100 / self.capacity_milli + 0.5)
            if 0 <= k < points:
                sums[k] += value
                counts[k] += 1
        return [100 * s / (c * self.capacity_milli) if c else None for s, c in zip(sums, counts, strict=True)]


def run_placement(
    nodes: Sequence[NodeState],
    pods: Sequence[Pod],
    scorer: str,
    workload: Sequence[WorkloadClass],
    *,
    job_id_base: int = 0,
    stop_at_pct: float | None = None,
    on_place: Callable[[Ledger], None] | None = None,
    on_fraction: Callable[[float], None] | None = None,
    owners: Sequence[str] | None = None,
    gpu_sharing: GpuSharing = GpuSharing.ANYONE,
) -> PlacementRun:
    """Place ``pods`` in order with the registered ``scorer``.

    ``workload`` is FGD's target workload (also what fragmentation is measured against);
    ``job_id_base`` offsets the pods' job ids (scorers that draw at random seed from them);
    ``stop_at_pct`` ends the run once arrived demand passes that % of capacity;
    ``on_place`` sees the ledger after every pod (for invariant checks);
    ``on_fraction`` hears every ``FRACTION_EVERY`` pods how much of the run is done (0 to 1);
    ``owners``: each pod's user (openb's pods have none: all one user's), whose fractional
    shares meet on a device only as ``gpu_sharing`` allows (``benchmarks/bench_gpu_sharing.py``).
    """
    config = SchedulerConfig(scorer=scorer, workload=tuple(workload), gpu_sharing=gpu_sharing)
    snapshot = Snapshot(nodes=tuple(nodes), pending=(), config=config)
    ledger = Ledger(snapshot)
    chosen = scorer_for(snapshot)
    measure = Fgd(workload)
    free_nodes = ledger.capacity.nodes
    frag_of = {name: measure.fragmentation(n, n.gpu_free, 0, 0) for name, n in free_nodes.items()}
    run = PlacementRun(gpu_capacity(nodes))
    fragmented = sum(frag_of.values())
    arrived = allocated = 0
    stop = None if stop_at_pct is None else stop_at_pct / 100 * run.capacity_milli
    for i, pod in enumerate(pods):
        task = pod.task()
        job = PendingJob(job_id_base + i, 1, float(i), (task,), owners[i] if owners is not None else "")
        attempt = Tentative()
        placements = place_gang(job, ledger, chosen, attempt)
        if placements is None:
            run.failed += 1
        else:
            attempt.commit()
            run.placed += 1
            allocated += sum(s.milli for p in placements for s in p.gpus)
            for name in {p.node for p in placements}:
                node = free_nodes[name]
                after = measure.fragmentation(node, node.gpu_free, 0, 0)
                fragmented += after - frag_of[name]
                frag_of[name] = after
        arrived += task.gpu_milli
        run.arrived.append(arrived)
        run.allocated.append(allocated)
        run.fragmented.append(fragmented)
        if on_place is not None:
            on_place(ledger)
        if on_fraction is not None and i % FRACTION_EVERY == 0:
            on_fraction(max(i / len(pods), 0.0 if stop is None else arrived / stop))
        if stop is not None and arrived > stop:
            break
    if on_fraction is not None:
        on_fraction(1.0)
    return run
