"""The Alibaba openb trace (Weng et al., "Beware of Fragmentation", USENIX ATC'23): nodes and pods.

Node lists have columns ``sn,cpu_milli,memory_mib,gpu,model``; pod lists
``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,…``. A pod asks for ``num_gpu``
devices of ``gpu_milli`` each (below 1000 only with one device: a shared GPU), and
``gpu_spec`` (``|``-separated) restricts the GPU models it may use.

``tune`` is the paper's inflation of a pod list to a target share of the cluster's GPUs;
``seeded_names`` its node names, which the authors' tie rule follows.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trainyard.core.resources import MILLI
from trainyard.scheduler.snapshot import GpuSlot, NodeState, TaskRequest, WorkloadClass
from trainyard.sim.traces import open_text


@dataclass(frozen=True)
class Pod:
    name: str
    cpu_milli: int
    memory_mb: int
    num_gpu: int
    gpu_milli: int  # per device
    gpu_models: tuple[str, ...] = ()

    @property
    def gpu_request(self) -> int:
        """Milli-GPUs the pod asks for in total (what counts towards arrived demand)."""
        return self.num_gpu * self.gpu_milli

    def task(self) -> TaskRequest:
        return TaskRequest("pod", 0, self.gpu_request, self.cpu_milli, self.memory_mb, self.gpu_models)


def _read(path: Path, required: set[str]) -> list[dict[str, str]]:
    with open_text(path) as f:
        reader = csv.DictReader(f)
        missing = required - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(sorted(missing))}; is this an openb list?")
        return list(reader)


def load_nodes(path: Path | str) -> tuple[NodeState, ...]:
    """Nodes of an openb node list, in file order; GPUs are whole devices of one model."""
    rows = _read(Path(path), {"sn", "cpu_milli", "memory_mib", "gpu", "model"})
    nodes = []
    for line, row in enumerate(rows, start=2):
        try:
            gpus = int(row["gpu"])
            nodes.append(
                NodeState(
                    row["sn"],
                    int(row["cpu_milli"]),
                    int(row["memory_mib"]),
                    tuple(GpuSlot(i, row["model"] or "", 0) for i in range(gpus)),
                )
            )
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
    return tuple(nodes)


def load_pods(path: Path | str) -> list[Pod]:
    rows = _read(Path(path), {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"})
    pods = []
    for line, row in enumerate(rows, start=2):
        try:
            num_gpu = int(row["num_gpu"] or 0)
            spec = (row.get("gpu_spec") or "").strip()
            pods.append(
                Pod(
                    row["name"],
                    int(row["cpu_milli"] or 0),
                    int(row["memory_mib"] or 0),
                    num_gpu,
                    int(row["gpu_milli"] or 0) if num_gpu else 0,
                    tuple(m for m in spec.split("|") if m) if spec else (),
                )
            )
        except ValueError as e:
            raise ValueError(f"{path}:{line}: {e}") from None
    return pods


def gpu_capacity(nodes: Sequence[NodeState]) -> int:
    """Milli-GPUs of the cluster."""
    return sum(len(n.gpus) for n in nodes) * MILLI


def tune(pods: Sequence[Pod], capacity_milli: int, ratio: float, seed: int) -> list[Pod]:
    """The paper's protocol: every pod, plus copies of randomly drawn pods until the GPU
    requests would pass ``ratio`` × capacity, then all shuffled; seeded."""
    rng = random.Random(seed)
    tuned = list(pods)
    target = ratio * capacity_milli
    total = sum(p.gpu_request for p in tuned)
    if not any(p.gpu_request > 0 for p in pods):
        rng.shuffle(tuned)
        return tuned  # no GPU requests: nothing to inflate
    while True:
        pod = rng.choice(pods)
        if total + pod.gpu_request > target:
            break
        tuned.append(pod)
        total += pod.gpu_request
    rng.shuffle(tuned)
    return tuned


def seeded_names(nodes: Sequence[NodeState], seed: int) -> tuple[NodeState, ...]:
    """The nodes as the authors' simulator names them for a seed: sorted by name, each
    prefixed with its place in a random order drawn from the seed (``0417-<sn>``). Their
    rule for equal scores, the node whose name sorts first, so takes a node at random per
    seed, not the trace's order, which runs its models and sizes in blocks (with the
    trace's names our FGD allocated 0.9 pp under theirs on ``cpu200``)."""
    ordered = sorted(nodes, key=lambda n: n.name)
    places = list(range(len(ordered)))
    random.Random(f"node-names-{seed}").shuffle(places)
    width = len(str(max(len(ordered) - 1, 0)))
    return tuple(replace(n, name=f"{place:0{width}d}-{n.name}") for place, n in zip(places, ordered))


def workload_of(pods: Sequence[Pod]) -> tuple[WorkloadClass, ...]:
    """The target workload: the pod list's pods by kind (GPU request, CPU, memory, models),
    weighted by how often each kind occurs. FGD, as the paper builds it, counts the GPU
    kinds only; the CPU-only kinds are there for ``fgd-cpu``'s CPU fragments."""
    counts = Counter((p.gpu_request, p.cpu_milli, p.memory_mb, p.gpu_models) for p in pods)
    return tuple(
        WorkloadClass(gpu_milli=g, weight=float(n), cpu_milli=c, memory_mb=m, gpu_models=models)
        for (g, c, m, models), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
