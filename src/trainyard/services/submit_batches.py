"""Group commit for submits: the jobs of submits that arrive together are made by one
thread, in one transaction, and each is answered once that transaction has committed.

Issue 33 (300 submits a second from 20 clients): each submit in a transaction of its own,
on a thread of the server's pool, paid for its own session, flushes and commit, and 20
threads took turns at the one interpreter lock and at SQLite's one write lock. Here a
submit hands its job file to ``SubmitBatches`` and waits; a batch thread (one on SQLite,
two on PostgreSQL) takes every submit queued by then (up to ``MAX_BATCH``), makes their
jobs one after the other in one session, as ``submission.submit`` would (but reading what
their checks need once for the batch, ``submit_facts.py``, and writing the jobs in one
statement), commits once, and then answers them all. Nothing is answered before the
commit: a 201 still means the job is stored.

Each submit is checked as if it were alone: the checks read the jobs made before it in the
same batch (its owner's waiting jobs count them). A submit its checks refuse (a
``ServiceError`` or ``SpecError``, raised before anything of it is written) is refused
alone, and the others go on. Anything else (the store failing, a bug) rolls the batch back,
and each of its submits is then made in a transaction of its own, as before, so that it
fails alone. The thread ends after ``IDLE_SECONDS`` without submits and starts again with
the next one. Submits that share a batch are made in the order of their owners' ids
(each owner's in the order they came): they came at the same time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from trainyard.services import idempotency
from trainyard.spec.models import JobSpec
from trainyard.store.rows import UserRow

if TYPE_CHECKING:  # the server's protocol names this module's class
    from trainyard.services.server import Server

MAX_BATCH = 64  # submits in one transaction at most: the first of them waits for all the others' work
IDLE_SECONDS = 1.0
# Threads making batches: SQLite writes one transaction at a time, so one; PostgreSQL takes
# several at once, and a thread waiting for its answers leaves the other the interpreter.
# Two, not four: a batch makes a few statements whatever its size (``submit_facts.py``), so
# fewer, larger batches cost less; 20 clients on 2 cores: 4 threads 283-297/s, 2 threads
# 336-367/s, 1 thread 354-368/s (docs/benchmarks.md). A second thread keeps submits going
# while one waits on a lock (an owner's row, held by a submit made alone).
SQLITE_THREADS = 1
POSTGRESQL_THREADS = 2

Make = Callable[["Server", UserRow, JobSpec, list[str]], idempotency.Answer]
# make_many(session, server, [(user, spec, warnings)]): the batch's submits in that session,
# an answer each, or the refusal of its checks (a ServiceError or SpecError, nothing of it
# written), in their order; anything raised rolls the whole batch back.
MakeMany = Callable[[Session, "Server", list[tuple[UserRow, JobSpec, list[str]]]],
                    list[idempotency.Answer | Exception]]


@dataclass
class _Submit:
    user: UserRow
    spec: JobSpec
    warnings: list[str]
    answer: Future[idempotency.Answer] = field(default_factory=Future)


class SubmitBatches:
    """The threads that make queued submits' jobs, several to a transaction."""

    def __init__(self, server: Server, make_many: MakeMany, make_alone: Make) -> None:
        # make_alone(server, user, spec, warnings): one submit in a transaction of its own.
        self._server = server
        self._make_many = make_many
        self._make_alone = make_alone
        self._queue: queue.SimpleQueue[_Submit] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = 0
        self._threads = SQLITE_THREADS if server.db.engine.dialect.name == "sqlite" else POSTGRESQL_THREADS

    def submit(self, user: UserRow, spec: JobSpec, warnings: list[str]) -> idempotency.Answer:
        """Queue ``spec`` as ``user``'s job; its answer once the job is committed (or the
        refusal, raised)."""
        return self.queue(user, spec, warnings).result()

    def queue(self, user: UserRow, spec: JobSpec, warnings: list[str]) -> Future[idempotency.Answer]:
        """``submit`` without waiting: its answer to come. The future cannot be cancelled
        (it runs from here): a submit queued is made, whether or not its caller waits."""
        item = _Submit(user, spec, warnings)
        item.answer.set_running_or_notify_cancel()
        self._queue.put(item)
        with self._lock:
            if self._running < self._threads:
                self._running += 1
                threading.Thread(target=self._run, name="trainyard-submits", daemon=True).start()
        return item.answer

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():  # a submit queued after this check starts a new thread
                        self._running -= 1
                        return
                continue
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            # In order of their owners: on PostgreSQL each submit locks its owner's row
            # (the count of their waiting jobs), and batches that lock in one order never
            # wait for each other in a circle.
            self._make(sorted(batch, key=lambda item: item.user.id))

    def _make(self, batch: list[_Submit]) -> None:
        try:
            with self._server.db.session() as session:
                outcomes = self._make_many(session, self._server,
                                           [(item.user, item.spec, item.warnings) for item in batch])
        except Exception:  # noqa: BLE001 - rolled back: each submit again, alone, so that it fails alone
            for item in batch:
                try:
                    item.answer.set_result(self._make_alone(self._server, item.user, item.spec, item.warnings))
                except Exception as error:  # noqa: BLE001 - the caller raises it
                    item.answer.set_exception(error)
            return
        if any(isinstance(outcome, idempotency.Answer) for outcome in outcomes):
            self._server.wake_controller()
        for item, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, Exception):
                item.answer.set_exception(outcome)
            else:
                item.answer.set_result(outcome)
