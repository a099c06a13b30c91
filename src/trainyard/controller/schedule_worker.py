"""``schedule(snapshot)`` in a worker process of its own, off the interpreter the API's
requests need (issue 33).

The scheduler is pure: a ``Snapshot`` in, ``Decisions`` out. Run in the server's process,
a cycle's ~0.6 s of Python at a thousand waiting jobs holds the interpreter the submits need, so
the controller had to space its cycles out (``loop.py``). Here the controller's thread pickles
the snapshot (in its own thread, so that its CPU time counts in the cycle's gap), a
``ProcessPoolExecutor`` of one ``spawn``ed worker computes, and the decisions come back
pickled; the controller's thread waits without the GIL meanwhile.

The guarantees do not change: the decisions are the same function's on the same snapshot,
written by the controller's one thread as before. If the worker dies (killed, out of memory),
the cycle that found it dead runs in this process, the death is logged, and a new worker is
started for the next cycle. A failure inside ``schedule`` itself is raised here, as in process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import Decisions, Snapshot

log = logging.getLogger(__name__)


PARENT_CHECK_SECONDS = 1.0


def _start_worker(parent: int) -> None:
    """The worker's initializer. A Ctrl-C at the terminal reaches the whole process group:
    the server decides when its worker ends (``ScheduleRunner.stop``). A server killed
    outright (``kill -9``) cannot say so, and the worker's own end of its queue keeps it
    waiting: it ends once its parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="trainyard-parent-watch", daemon=True).start()


def _worker_pid() -> int:
    return os.getpid()


def _decide(data: bytes) -> bytes:
    decisions = schedule(pickle.loads(data))
    return pickle.dumps(decisions, protocol=pickle.HIGHEST_PROTOCOL)


class ScheduleRunner:
    """Where a cycle's ``schedule(snapshot)`` runs: a worker process (``worker=True``, what
    ``yard up`` uses unless ``scheduler_worker`` is off) or the caller's thread (the tests'
    controllers; the simulator calls ``schedule`` directly)."""

    def __init__(self, *, worker: bool) -> None:
        self.worker = worker
        self._pool: ProcessPoolExecutor | None = None
        self._booted: Future[int] | None = None
        self.restarts = 0
        # The last cycle's seconds of pickling on this side (snapshot out, decisions in) and
        # its bytes both ways: what the worker costs the server's interpreter.
        self.transfer_seconds = 0.0
        self.transfer_bytes = 0
        # The last cycle's wait for the worker's answer (0 when it ran in process): the
        # controller spaces its cycles out by it (``loop.py``).
        self.worker_seconds = 0.0

    def start(self) -> None:
        """Start the worker now, so that its imports are paid before the first cycle."""
        if self.worker and self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                initargs=(os.getpid(),),
            )
            self._booted = self._pool.submit(_worker_pid)

    def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def worker_pid(self, timeout: float = 60.0) -> int | None:
        """The worker's process id once it runs (None in process): for the tests that kill it."""
        booted = self._booted
        return None if booted is None else booted.result(timeout=timeout)

    def decide(self, snapshot: Snapshot) -> Decisions:
        self.worker_seconds = 0.0
        pool = self._pool
        if pool is None:
            return schedule(snapshot)
        began = time.perf_counter()
        try:
            data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            # A snapshot that cannot travel (a field of a type pickle refuses) is a bug to
            # fix, but not a reason to stop scheduling: this cycle runs here.
            log.exception("the snapshot cannot be sent to the scheduler's worker; scheduling in process")
            return schedule(snapshot)
        pickled = time.perf_counter() - began
        try:
            asked = time.perf_counter()
            answer = pool.submit(_decide, data).result()
            self.worker_seconds = time.perf_counter() - asked
        except BrokenProcessPool:
            log.error("the scheduler's worker process has died; this cycle is scheduled in the server's "
                      "process, and a new worker is started for the next")
            self._restart(pool)
            return schedule(snapshot)
        began = time.perf_counter()
        decisions: Decisions = pickle.loads(answer)
        self.transfer_seconds = pickled + time.perf_counter() - began
        self.transfer_bytes = len(data) + len(answer)
        return decisions

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        broken.shutdown(wait=False, cancel_futures=True)
        self._pool = None
        self.restarts += 1
        self.start()
