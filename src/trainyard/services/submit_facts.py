"""What a batch of submits reads once for all of them (``submit_batches.py``), not once per
submit: its owners' waiting jobs (their rows locked first, on PostgreSQL), their GPU limits,
and the VCs' quotas and borrowing settings.

Issue 33: on PostgreSQL each submit of a batch made six statements, each a round trip to a
server that shares the machine's cores, one after the other on the batch's thread: the lock
of its owner's row, the count of their waiting jobs, the VCs, the owner's limit at the
job's priority, the job's insert and its event's. Read here, the first four are a few
statements per batch, whatever its size, and the inserts go in one statement each per batch
(``submission.py``). The batch is one transaction: what it reads at its start is what its
submits would have read one after the other, but for the jobs made earlier in the batch,
which ``made`` adds to their owner's count (each submit is still checked as if it were
alone, after those before it).
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cached_property

from sqlalchemy.orm import Session

from trainyard.services.admin import Borrowing, guaranteed_quotas, vc_borrowing
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import VirtualClusterRow


class SubmitFacts:
    """The store as a batch of submits by ``owners`` sees it, read in ``session``."""

    def __init__(self, session: Session, owners: Collection[int], *, count_waiting: bool) -> None:
        # count_waiting: whether the cluster limits waiting jobs per user (else nothing is
        # counted, nor locked, as a submit alone would not).
        self._session = session
        self._waiting = job_queries.waiting_job_counts(session, owners) if count_waiting else {}
        self._limits = user_queries.quota_millis(session, owners)

    def waiting(self, user_id: int) -> int:
        """How many of the user's jobs wait, those this batch has made so far included."""
        return self._waiting[user_id]

    def made(self, user_id: int) -> None:
        """One more waiting job of the user's, made by this batch."""
        if user_id in self._waiting:
            self._waiting[user_id] += 1

    def user_quota_milli(self, user_id: int, priority: str) -> int | None:
        """The most milli-GPU the user may hold at ``priority`` (None: no limit)."""
        return self._limits.get((user_id, priority))

    @cached_property
    def _vcs(self) -> list[VirtualClusterRow]:
        return vc_queries.all_vcs(self._session)

    @cached_property
    def gpus_by_model(self) -> dict[str, int]:
        return node_queries.gpus_by_model(self._session)

    @cached_property
    def vc_quotas(self) -> dict[str, tuple[dict[str, int], bool]]:
        """``admin.guaranteed_quotas``, read once."""
        return guaranteed_quotas(self._session, self.gpus_by_model if self._vcs else None, self._vcs)

    @cached_property
    def vc_borrowing(self) -> dict[str, Borrowing]:
        """``admin.vc_borrowing``, read once."""
        return vc_borrowing(self._session, self._vcs)
