"""Keep the ``nodes`` table in step with what the backend reports."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy.orm import Session

from trainyard.backends.base import NodeInventory
from trainyard.core.clock import Clock
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import NodeRow


def sync_inventory(session: Session, backend: str, nodes: list[NodeInventory], clock: Clock) -> bool:
    """Upsert the backend's nodes; nodes it no longer reports become unschedulable.

    Returns whether anything changed (so the scheduler knows to run).
    """
    existing = node_queries.nodes_of_backend(session, backend)
    changed = False
    for node in nodes:
        gpus = [asdict(g) for g in node.gpus]
        row = existing.pop(node.name, None)
        values = dict(
            address=node.address,
            cpu_milli=node.cpu_milli,
            memory_mb=node.memory_mb,
            gpus=gpus,
            schedulable=node.schedulable,
            labels=dict(node.labels),
        )
        if row is None:
            session.add(NodeRow(name=node.name, backend=backend, updated_at=clock.now(), **values))
            changed = True
            continue
        if any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            changed = True
        row.updated_at = clock.now()
    for gone in existing.values():
        if gone.schedulable:
            gone.schedulable = False
            changed = True
    return changed
