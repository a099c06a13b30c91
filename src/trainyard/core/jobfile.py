"""Reading a stored job file (the normalised spec, as the API returns it) where its models are
not loaded: the CLI's plain tables, the portal's pages, the services' views. Standard library only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def instance_span(role: Mapping[str, Any]) -> tuple[int, int]:
    """A task role's (fewest, most) instances: an elastic role's ``instances: {min, max}``, else
    its fixed count twice (1 when the file leaves it out)."""
    value = role.get("instances", 1)
    if isinstance(value, Mapping):
        return int(value.get("min", 1)), int(value.get("max", value.get("min", 1)))
    return int(value), int(value)


def task_labels(spec: Mapping[str, Any], ran: Iterable[tuple[str, int]] = ()) -> list[str]:
    """Every task the job file declares, ``ROLE/INDEX`` (an elastic role's up to its maximum),
    and any task in ``ran`` (role, index) beyond them (an elastic role's workers grown after
    others left take higher indices), role by role, index by index."""
    roles = spec.get("taskRoles") or {}
    tasks = {(role, i) for role, body in roles.items() for i in range(instance_span(body)[1])} | set(ran)
    order = {role: n for n, role in enumerate(roles)}
    return [f"{role}/{i}" for role, i in sorted(tasks, key=lambda task: (order.get(task[0], len(order)), task))]
