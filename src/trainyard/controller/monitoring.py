"""The controller's monitoring tick: a round of samples from the backend, into the history.

Every ``monitor_interval_seconds`` (when the backend is a ``MetricsSource``): the running
tasks and the GPUs each holds come from the store, the backend samples its nodes and
those tasks, and ``monitor.history`` records the round. A round runs in a thread of its
own, so sampling a large machine never holds up scheduling; one round at a time (a round
still running when the next is due makes that one wait). A failing round, or a figure a
backend could not get, is logged once per distinct message, never raised into the loop.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from trainyard.backends.base import MetricsSource, TaskKey
from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.core.metrics import Sampled
from trainyard.core.settings import DEFAULT_MONITOR_INTERVAL_SECONDS
from trainyard.monitor import history
from trainyard.store.db import Database
from trainyard.store.queries import metrics as metric_queries

log = logging.getLogger(__name__)

_MILLI = 1000
_SAID_AT_MOST = 1000  # distinct messages remembered; then they may be said again


class Monitoring(Periodic):
    """Samples the backend every ``interval`` seconds and keeps the rounds in the store."""

    thread_name = "trainyard-monitoring"

    def __init__(
        self, db: Database, backend: MetricsSource, clock: Clock, interval: float = DEFAULT_MONITOR_INTERVAL_SECONDS
    ) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.backend = backend
        self.rounds = 0
        self.last_round_seconds: float | None = None  # wall time the last round took
        self._said: set[str] = set()

    def run_logged(self) -> None:
        try:
            self.sample_once()
        except Exception as exc:  # noqa: BLE001 - a failed round is retried at the next interval
            self._say_once(f"sampling failed: {exc!r}", exc_info=True)

    def sample_once(self) -> Sampled:
        """One round now: sample the running tasks and the nodes, and record them."""
        started = time.perf_counter()
        with self.db.session() as session:
            running: dict[TaskKey, tuple[int, ...]] = {}
            held: dict[TaskKey, float] = {}
            for task, attempt in metric_queries.running_tasks(session):
                key = TaskKey(task.job_id, attempt, task.role, task.index, task.run)
                running[key] = tuple(int(device) for device, _ in task.gpus)
                held[key] = sum(milli for _, milli in task.gpus) / _MILLI
        sampled = self.backend.sample(self.clock.now(), running)
        # What a task holds is the store's to say: a fraction of a device is a fraction.
        by_task = {(k.job_id, k.attempt, k.role, k.index): v for k, v in held.items()}
        tasks = tuple(
            replace(t, gpus_held=by_task.get((t.job_id, t.attempt, t.role, t.index), t.gpus_held))
            for t in sampled.tasks
        )
        sampled = replace(sampled, tasks=tasks)
        with self.db.session() as session:
            history.record(session, sampled)
        for error in sampled.errors:
            self._say_once(error)
        self.rounds += 1
        self.last_round_seconds = time.perf_counter() - started
        return sampled

    def _say_once(self, message: str, *, exc_info: bool = False) -> None:
        if message in self._said:
            log.debug("%s", message)
            return
        if len(self._said) >= _SAID_AT_MOST:
            self._said.clear()
        self._said.add(message)
        log.warning("%s (said once; later repeats are logged at debug level)", message, exc_info=exc_info)
