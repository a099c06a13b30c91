"""Housekeeping the controller starts when due and runs beside its loop, in a thread of its own."""

from __future__ import annotations

import threading

from trainyard.core.clock import Clock


class Periodic:
    """Runs ``run_logged`` in a background thread at most once per ``interval`` seconds (on
    ``clock``), one run at a time. The controller calls ``start_if_due`` every cycle, so a
    slow run (removing a large tree, sampling a large machine) never holds up scheduling;
    a run still going when the next is due makes that one wait."""

    thread_name = "trainyard-periodic"

    def __init__(self, clock: Clock, interval: float) -> None:
        self.clock = clock
        self.interval = interval
        self._last_start: float | None = None
        self._thread: threading.Thread | None = None

    def start_if_due(self) -> bool:
        """Start a run in the background when ``interval`` has passed since the last one
        started and none is running; True when one started."""
        now = self.clock.monotonic()
        if self._last_start is not None and now - self._last_start < self.interval:
            return False
        if self._thread is not None and self._thread.is_alive():
            return False
        self._last_start = now
        self._thread = threading.Thread(target=self.run_logged, name=self.thread_name, daemon=True)
        self._thread.start()
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for the run in progress, if any."""
        if self._thread is not None:
            self._thread.join(timeout)

    def run_logged(self) -> None:
        """One run; it must log its own failures, never raise."""
        raise NotImplementedError
