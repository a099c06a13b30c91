"""Keeping the monitoring history bounded: downsampling and pruning it every minute.

The controller calls ``start_if_due`` every cycle; once ``interval`` has passed, one
``monitor.history.maintain`` runs in its own transaction, beside the loop in a thread of its
own (``Periodic``). In the steady state it averages a minute of samples (for 1,000 tasks,
6,000 rows into 1,000; see ``benchmarks/bench_metrics.py``); after a long stop it catches up
on the backlog, which must not hold up scheduling.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier
from trainyard.monitor.history import Maintained, maintain
from trainyard.store.db import Database

log = logging.getLogger(__name__)

MAINTAIN_INTERVAL_SECONDS = 60.0  # the finest averaged step worth waiting for


class HistoryKeeper(Periodic):
    """Downsamples and prunes the history by ``retention`` every ``interval`` seconds."""

    thread_name = "trainyard-history"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        retention: Sequence[RetentionTier] = DEFAULT_RETENTION_TIERS,
        *,
        interval: float = MAINTAIN_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.retention = tuple(retention)
        self.last: Maintained | None = None  # what the latest run did

    def run_logged(self) -> None:
        try:
            self.maintain()
        except Exception:  # noqa: BLE001 - retried at the next interval
            log.exception("maintaining the monitoring history failed")

    def maintain(self) -> Maintained:
        """Downsample and prune now; what was done."""
        with self.db.session() as session:
            done = maintain(session, self.clock.now(), self.retention)
        if done.removed or any(done.written.values()):
            log.debug("monitoring history: wrote %s averaged rows, removed %d", done.written, done.removed)
        self.last = done
        return done
