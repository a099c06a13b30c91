"""Job priorities: their names, their order, and which of them are guaranteed.

The one home of this vocabulary. The scheduler works with ranks (small integers, 0 the
highest) so that it can also rank jobs by rules of its own (the simulator's Tiresias
levels); everything that names a priority — the services, the controller, the API, the CLI,
the scheduler's messages — uses :class:`Priority`.

``spec/`` cannot import this module (``spec/`` and ``core/`` are independent bottom
layers), so the job file's ``priority`` field keeps its own enum of accepted strings,
``trainyard.spec.models.Priority``; ``tests/core/test_priorities.py`` holds the two equal,
name for name and in order.
"""

from __future__ import annotations

from enum import StrEnum


class Priority(StrEnum):
    """Scheduling priority of a job, highest first (declaration order is rank order)."""

    PROD = "prod"
    NORMAL = "normal"
    LOW = "low"
    OPPO = "oppo"  # opportunistic: runs on idle capacity anywhere and is preempted first

    @property
    def rank(self) -> int:
        """0 for the highest priority (prod), 3 for the lowest (oppo)."""
        return _RANKS[self]

    @property
    def is_opportunistic(self) -> bool:
        """Runs on idle GPUs of any VC, counts against no quota, is preempted first."""
        return self.rank >= OPPORTUNISTIC_RANK

    @classmethod
    def of_rank(cls, rank: int) -> Priority:
        """The priority of ``rank``; ranks past the lowest (the simulator's) are the lowest."""
        return PRIORITIES[min(max(rank, 0), len(PRIORITIES) - 1)]


PRIORITIES: tuple[Priority, ...] = tuple(Priority)
_RANKS: dict[Priority, int] = {priority: rank for rank, priority in enumerate(PRIORITIES)}
DEFAULT_PRIORITY = Priority.NORMAL
# Ranks from this one down are opportunistic; every rank above it is guaranteed (counts
# against its VC's quota and may reclaim it).
OPPORTUNISTIC_RANK = _RANKS[Priority.OPPO]
PRIORITY_NAMES: tuple[str, ...] = tuple(priority.value for priority in PRIORITIES)
