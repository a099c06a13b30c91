"""Keeping the monitoring history bounded: downsampling and pruning it every minute.

The controller calls ``maintain_if_due`` every cycle; once ``interval`` has passed, one
``monitor.history.maintain`` runs in its own transaction. It runs in the controller's
thread: in the steady state it averages a minute of samples (for 1,000 tasks, 6,000 rows
into 1,000; see ``benchmarks/bench_metrics.py``), which takes far less than a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from trainyard.core.clock import Clock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier
from trainyard.monitor.history import Maintained, maintain
from trainyard.store.db import Database

log = logging.getLogger(__name__)

MAINTAIN_INTERVAL_SECONDS = 60.0  # the finest averaged step worth waiting for


class HistoryKeeper:
    """Downsamples and prunes the history by ``retention`` every ``interval`` seconds."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        retention: Sequence[RetentionTier] = DEFAULT_RETENTION_TIERS,
        *,
        interval: float = MAINTAIN_INTERVAL_SECONDS,
    ) -> None:
        self.db = db
        self.clock = clock
        self.retention = tuple(retention)
        self.interval = interval
        self._last: float | None = None

    def maintain_if_due(self) -> Maintained | None:
        """Run ``maintain`` when ``interval`` has passed since the last run; what it did, or None."""
        mono = self.clock.monotonic()
        if self._last is not None and mono - self._last < self.interval:
            return None
        self._last = mono
        with self.db.session() as session:
            done = maintain(session, self.clock.now(), self.retention)
        if done.removed or any(done.written.values()):
            log.debug("monitoring history: wrote %s averaged rows, removed %d", done.written, done.removed)
        return done
