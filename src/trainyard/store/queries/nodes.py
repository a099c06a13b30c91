"""Queries about nodes: the inventory, and what unfinished tasks hold on them."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.core.states import TaskState
from trainyard.store.queries.decoded import as_text, device_models
from trainyard.store.rows import NodeRow, TaskRow

UNFINISHED = (TaskState.WAITING, TaskState.RUNNING)


def all_nodes(session: Session) -> list[NodeRow]:
    """Every node, by name."""
    return list(session.scalars(select(NodeRow).order_by(NodeRow.name)))


def nodes_page(session: Session, first: int, count: int) -> tuple[list[NodeRow], int]:
    """``count`` nodes by name from position ``first`` (from 0), and how many nodes there are."""
    total = session.scalar(select(func.count()).select_from(NodeRow)) or 0
    return list(session.scalars(select(NodeRow).order_by(NodeRow.name).offset(first).limit(count))), total


def node_named(session: Session, name: str) -> NodeRow | None:
    return session.get(NodeRow, name)


def nodes_of_backend(session: Session, backend: str) -> dict[str, NodeRow]:
    """The nodes a backend reported, by name."""
    return {n.name: n for n in session.scalars(select(NodeRow).where(NodeRow.backend == backend))}


def node_addresses(session: Session) -> dict[str, str]:
    return {name: address for name, address in session.execute(select(NodeRow.name, NodeRow.address))}


def gpus_by_model(session: Session) -> dict[str, int]:
    """How many GPUs of each model the cluster has."""
    capacity: dict[str, int] = {}
    for gpus in session.scalars(select(NodeRow.gpus)):
        for gpu in gpus:
            capacity[gpu["model"]] = capacity.get(gpu["model"], 0) + 1
    return capacity


def unfinished_tasks(session: Session, nodes: Collection[str] | None = None) -> list[TaskRow]:
    """Tasks that hold resources: placed and not yet ended (on ``nodes``; None: anywhere)."""
    query = select(TaskRow).where(TaskRow.state.in_(UNFINISHED))
    if nodes is not None:
        query = query.where(TaskRow.node.in_(nodes))
    return list(session.scalars(query))


def unfinished_task_usage(session: Session) -> list[tuple[str, list[list[int]], int, int]]:
    """(node, GPU shares, CPU milli, memory MB) of every unfinished task: what nodes have allocated."""
    query = select(TaskRow.node, TaskRow.gpus, TaskRow.cpu_milli, TaskRow.memory_mb).where(
        TaskRow.state.in_(UNFINISHED)
    )
    return [(node, gpus, cpu, memory) for node, gpus, cpu, memory in session.execute(query)]


class NodeGpus(NamedTuple):
    name: str
    gpus: tuple[tuple[int, str], ...]  # (device index, model) of each GPU
    schedulable: bool  # as the backend reports, and not cordoned


def node_gpus(session: Session) -> list[NodeGpus]:
    """Every node's GPUs and whether it takes work, by name. The GPUs come as tuples decoded
    once per distinct stored list (``decoded``), not as fresh dicts: ``GET /metrics`` reads
    every node on every scrape."""
    query = select(
        NodeRow.name, as_text(NodeRow.gpus), NodeRow.schedulable, NodeRow.cordoned
    ).order_by(NodeRow.name)
    return [
        NodeGpus(name, device_models(gpus), schedulable and not cordoned)
        for name, gpus, schedulable, cordoned in session.execute(query)
    ]
