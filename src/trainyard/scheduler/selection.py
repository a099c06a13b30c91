"""Why no node suits a task's resource expression, clause by clause, for why-pending and submit.

The scheduler itself filters with ``FreeNode.suits``/``admits`` (``capacity.py``); this
module only explains: the first top-level clause (``&&`` operand) that no node meets, with
the best value the cluster has for a simple comparison on a number ("no node meets
gpu.memoryMB >= 40000: the largest GPU has 32768 MiB"). Nodes alike (the same labels,
sizes and GPUs) are asked once, and each answer is remembered across cycles, so explaining
many jobs on a large cluster costs a few evaluations per kind of node.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainyard.core.selectors import Clause, GpuFacts, NodeFacts, attribute_value, clause_allows, compile_selector
from trainyard.scheduler.capacity import FreeNode
from trainyard.scheduler.snapshot import TaskRequest

# (clause, node kind, device) -> whether the clause is true there
_ANSWERS: dict[tuple[object, ...], bool] = {}

_BEST = {
    ("gpu", "memoryMB", True): "the largest GPU has {} MiB",
    ("gpu", "memoryMB", False): "the smallest GPU has {} MiB",
    ("gpu", "index", True): "the highest GPU index is {}",
    ("gpu", "index", False): "the lowest GPU index is {}",
    ("node", "memoryMB", True): "the largest node has {} MiB",
    ("node", "memoryMB", False): "the smallest node has {} MiB",
    ("node", "cpu", True): "the largest node has {} CPUs",
    ("node", "cpu", False): "the smallest node has {} CPUs",
    ("node", "gpus", True): "the most GPUs on a node is {}",
    ("node", "gpus", False): "the fewest GPUs on a node is {}",
}


def unmet(nodes: Iterable[FreeNode], task: TaskRequest) -> str | None:
    """Why no node suits ``task``'s expression (``no node meets …``), or None if one does."""
    if not task.selector:
        return None
    gpus = task.gpu_milli > 0
    kinds = _kinds(nodes, task.selector, gpus)
    if any(any(node.selected(task.selector, gpus)) for node in kinds):
        return None
    selector = compile_selector(task.selector, gpus=gpus)
    for clause in selector.clauses:
        why = _unmet_clause(clause, kinds, selector.uses_name)
        if why is not None:
            return why
    return f"no node meets {' '.join(task.selector.split())} (each part alone is met by some node, not all together)"


def _kinds(nodes: Iterable[FreeNode], source: str, gpus: bool) -> list[FreeNode]:
    """One node of each kind an expression cannot tell apart."""
    uses_name = compile_selector(source, gpus=gpus).uses_name
    seen: dict[tuple[object, ...], FreeNode] = {}
    for node in nodes:
        seen.setdefault(_kind(node, uses_name), node)
    return list(seen.values())


def _kind(node: FreeNode, uses_name: bool) -> tuple[object, ...]:
    facts = node.facts()
    return (
        facts.name if uses_name else "", tuple(sorted(facts.labels.items())), facts.cpu_milli, facts.memory_mb,
        facts.gpus, tuple(zip(node.gpu_index, node.gpu_model, node.gpu_memory_mb)),
    )


def _unmet_clause(clause: Clause, kinds: list[FreeNode], uses_name: bool) -> str | None:
    values: list[float] = []
    for node in kinds:
        facts = node.facts()
        devices: list[GpuFacts | None] = (
            [node.gpu_facts(p) for p in range(len(node.gpu_index))] if clause.uses_gpu else [None]
        )
        for device in devices:
            if _allows(clause, node, facts, device, uses_name):
                return None
            if clause.comparison is not None:
                value = attribute_value(clause.comparison[0], clause.comparison[1], facts, device)
                if value is not None:
                    values.append(value)
    message = f"no node meets {clause.text}"
    if clause.comparison is not None and clause.comparison[2] != "==" and values:
        scope, attribute, op = clause.comparison
        wants_more = op in (">", ">=")
        best = max(values) if wants_more else min(values)
        words = _BEST.get((scope, attribute, wants_more))
        shown = f"{best:g}"
        message += ": " + (words.format(shown) if words else f"the cluster's best {scope}.{attribute} is {shown}")
    return message


def _allows(clause: Clause, node: FreeNode, facts: NodeFacts, device: GpuFacts | None, uses_name: bool) -> bool:
    key = (clause.text, _kind(node, uses_name), device)
    found = _ANSWERS.get(key)
    if found is None:
        if len(_ANSWERS) > 65536:
            _ANSWERS.clear()
        found = _ANSWERS[key] = clause_allows(clause, facts, device)
    return found
