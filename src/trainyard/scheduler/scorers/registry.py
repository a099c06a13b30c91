"""The one registry of placement scorers, chosen by ``SchedulerConfig.scorer``.

Scorers are listed here explicitly — never registered as a side effect of importing them —
so that this dict is the whole list and an unknown name fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable

from trainyard.scheduler.scorers.base import Scorer
from trainyard.scheduler.scorers.bestfit import BestFit
from trainyard.scheduler.scorers.fgd_cpu import FgdCpu
from trainyard.scheduler.scorers.rated import (
    BestFitRated,
    DotProduct,
    FgdRated,
    GpuClustering,
    GpuPacking,
    RandomFit,
)
from trainyard.scheduler.scorers.topology import Topology
from trainyard.scheduler.snapshot import Snapshot

SCORERS: dict[str, Callable[[Snapshot], Scorer]] = {
    "bestfit": BestFit.for_snapshot,
    "topology": Topology.for_snapshot,
    "fgd": FgdRated.for_snapshot,  # the paper's FGD, as its authors' simulator scores it
    "fgd-cpu": FgdCpu.for_snapshot,
    # The FGD paper's baselines, rated per node as its Kubernetes-based simulator does.
    "random": RandomFit.for_snapshot,
    "dotprod": DotProduct.for_snapshot,
    "clustering": GpuClustering.for_snapshot,
    "packing": GpuPacking.for_snapshot,
    "bestfit-cpu-gpu": BestFitRated.for_snapshot,
}


def scorer_for(snapshot: Snapshot) -> Scorer:
    name = snapshot.config.scorer
    factory = SCORERS.get(name)
    if factory is None:
        raise ValueError(f"unknown scorer {name!r}; the scorers are: {', '.join(sorted(SCORERS))}")
    return factory(snapshot)
