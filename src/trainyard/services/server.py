"""What a use case needs of the server it runs in: the store, the backend, the clock, the
shared caches (parsed job files, verified tokens), the site's limits, and the controller to
wake once it has committed something the controller must act on. The web layer's app
context (``web/context.py``) is one; a use case takes it as this protocol, so that services
import nothing of the web."""

from __future__ import annotations

from typing import Protocol

from trainyard.backends.base import Backend
from trainyard.core.clock import Clock
from trainyard.core.retention import RetentionTier
from trainyard.core.sessions import SessionPolicy
from trainyard.scheduler.snapshot import NodeState
from trainyard.services.auth import TokenCache
from trainyard.services.jobs import SubmitLimits
from trainyard.services.specs import StoredSpecs
from trainyard.services.submit_batches import SubmitBatches
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.db import Database


class Server(Protocol):
    db: Database
    backend: Backend
    clock: Clock
    specs: StoredSpecs
    tokens: TokenCache  # forget a user's after revoking or disabling
    submit_limits: SubmitLimits
    submit_batches: SubmitBatches | None  # group commit of submits (None: each in a transaction of its own)
    idempotency_key_hours: float
    dataset_allowed_hosts: tuple[str, ...]  # a dataset URL's hosts allowed where they resolve to our own addresses
    sessions: SessionPolicy
    monitor_interval_seconds: float  # how fresh a sample must be to show as live
    monitor_retention: tuple[RetentionTier, ...]  # what the monitoring history keeps
    fair_share_half_life_seconds: float  # the scheduler's (0: fair share off): `yard usage`'s recent figures
    workdirs: WorkdirStore  # where uploaded working directories are kept, and how big one may be

    def node_states(self) -> list[NodeState]:
        """The inventory for submit-time fit checks (cached briefly)."""
        ...

    def wake_controller(self) -> None: ...
