"""Keeping the monitoring history bounded: downsampling and pruning it every minute, and
summing each complete UTC day's measured use per task before its rows go.

The controller calls ``start_if_due`` every cycle; once ``interval`` has passed, one
``monitor.history.maintain`` runs in its own transaction, beside the loop in a thread of its
own (``Periodic``). In the steady state it averages a minute of samples (for 1,000 tasks,
6,000 rows into 1,000; see ``benchmarks/bench_metrics.py``); after a long stop it catches up
on the backlog, which must not hold up scheduling. Then each day that may close
(``services/usage_days.py``) is summed and closed in a transaction of its own, so that a
stop between two days loses neither, and closed days past their keep are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import date, datetime

from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier
from trainyard.core.settings import DEFAULT_MONITOR_INTERVAL_SECONDS, DEFAULT_USAGE_DAYS_KEEP_DAYS
from trainyard.monitor.history import Maintained, maintain
from trainyard.services import usage_days
from trainyard.store.db import Database

log = logging.getLogger(__name__)

MAINTAIN_INTERVAL_SECONDS = 60.0  # the finest averaged step worth waiting for
# Days closed per run at most: the first run after an upgrade finds a month of history to sum
# (about 8 s a day for 1,000 tasks on a loaded SQLite); in runs of a few days, the minute's
# downsampling waits for a few days' sums, not the month's.
CLOSE_DAYS_PER_RUN = 4


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
        monitor_interval_seconds: float = DEFAULT_MONITOR_INTERVAL_SECONDS,
        usage_days_keep_days: int = DEFAULT_USAGE_DAYS_KEEP_DAYS,
    ) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.retention = tuple(retention)
        self.monitor_interval = monitor_interval_seconds  # a raw row's span, and when a day closes
        self.keep_days = usage_days_keep_days
        self.last: Maintained | None = None  # what the latest run did
        self.last_closed: list[date] = []  # the days the latest run closed

    def run_logged(self) -> None:
        try:
            self.maintain()
        except Exception:  # noqa: BLE001 - retried at the next interval
            log.exception("maintaining the monitoring history failed")

    def maintain(self) -> Maintained:
        """Downsample and prune now, then close the days that may close; what was done."""
        now = self.clock.now()
        with self.db.session() as session:
            done = maintain(session, now, self.retention)
        if done.removed or any(done.written.values()):
            log.debug("monitoring history: wrote %s averaged rows, removed %d", done.written, done.removed)
        self.last = done
        self.last_closed = self.close_days(now)
        return done

    def close_days(self, now: datetime) -> list[date]:
        """Sum and close the days that may close (the oldest ``CLOSE_DAYS_PER_RUN``), one
        transaction a day; the days closed."""
        with self.db.session() as session:
            days = usage_days.days_to_close(session, now, self.monitor_interval, [t.step for t in self.retention],
                                            keep_days=self.keep_days)[:CLOSE_DAYS_PER_RUN]
        for day in days:
            with self.db.session() as session:
                tasks = usage_days.close_day(session, day, now, self.monitor_interval)
            log.info("usage: closed %s (%d tasks measured)", day.isoformat(), tasks)
        if days:  # only a day closing moves the oldest day kept (one closes each UTC day)
            with self.db.session() as session:
                usage_days.forget_days(session, now, self.keep_days)
        return days
