"""Submit, dry run and clone, each composed once for every door: ``POST /api/v1/jobs``
(``?dryRun=true``), ``POST /api/v1/jobs/{id}/clone`` and the portal's Submit page (Check,
Submit, and Submit on a clone) call these.

Each opens its own unit of work, makes the job at most once per ``Idempotency-Key``
(``idempotency.py``; the portal sends none), and wakes the controller once a new job is
committed. What the server runs with comes in as a ``services.server.Server`` (the web
layer's app context is one).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from sqlalchemy.orm import Session

from trainyard.backends.base import TaskAccountCheck, gpu_share_note
from trainyard.core.transitions import Event
from trainyard.scheduler.snapshot import NodeState
from trainyard.services import idempotency
from trainyard.services import jobs as job_service
from trainyard.services.errors import Forbidden, ServiceError
from trainyard.services.server import Server
from trainyard.services.submit_batches import SubmitBatches
from trainyard.services.submit_facts import SubmitFacts
from trainyard.services.views import submit_result
from trainyard.spec.errors import SpecError
from trainyard.spec.models import JobSpec
from trainyard.store.events import record_event
from trainyard.store.rows import JobRow, UserRow


@dataclass(frozen=True)
class Keyed:
    """A submit's ``Idempotency-Key`` (None: none) and its request's fingerprint."""

    key: str | None = None
    fingerprint: str = ""


def _keep(server: Server) -> timedelta:
    return timedelta(hours=server.idempotency_key_hours)


def earlier_answer(server: Server, user: UserRow, keyed: Keyed) -> idempotency.Answer | None:
    """The first answer to ``keyed``'s request, if this is a retry of one (else None);
    Invalid if the key came with another request. Asked before the request is parsed."""
    if keyed.key is None:
        return None
    return idempotency.earlier_answer(server.db, user, keyed.key, keyed.fingerprint, now=server.clock.now(),
                                      keep=_keep(server))


def check_task_account(server: Server, user: UserRow) -> None:
    """Forbidden (403) when the backend runs tasks as their owners' OS accounts and ``user``
    has none: the message names the user and the admin's fix."""
    backend = server.backend
    if not isinstance(backend, TaskAccountCheck):
        return
    try:
        backend.check_task_account(user.name)
    except ValueError as exc:
        raise Forbidden(f"user {user.name} cannot run jobs on this cluster yet: {exc}",
                        details=[{"path": "user", "message": f"no OS account for {user.name}"}]) from None


def _warnings(server: Server, spec: JobSpec) -> list[str]:
    return job_service.backend_warnings(spec, server.backend.name, gpu_share_note(server.backend))


def dry_run(server: Server, user: UserRow, spec: JobSpec) -> list[str]:
    """Every check a submit of ``spec`` would make, nothing made; the backend's warnings."""
    job_service.check_backend(spec, server.backend.name)
    check_task_account(server, user)
    nodes = server.node_states()
    with server.db.session() as session:
        job_service.check_submittable(session, user, spec, nodes=nodes, limits=server.submit_limits)
    return _warnings(server, spec)


def check_clone(server: Server, user: UserRow, job_id: int, changes: job_service.CloneChanges) -> list[str]:
    """Every check a clone of job ``job_id`` with ``changes`` would make, nothing made; the
    backend's warnings for the clone."""
    check_task_account(server, user)
    nodes = server.node_states()
    with server.db.session() as session:
        spec = job_service.check_clone(session, user, job_id, changes, specs=server.specs, nodes=nodes,
                                       limits=server.submit_limits)
    job_service.check_backend(spec, server.backend.name)
    return _warnings(server, spec)


def submit(server: Server, user: UserRow, spec: JobSpec, keyed: Keyed = Keyed()) -> idempotency.Answer:
    """Queue ``spec`` as ``user``'s job (at most once per key): the answer, a ``SubmitResult``.
    Without a key or a working directory, it is made with the other submits of the moment,
    in one transaction (``submit_batches.py``), where the server has batches."""
    job_service.check_backend(spec, server.backend.name)
    warnings = _warnings(server, spec)
    check_task_account(server, user)
    if server.submit_batches is not None and keyed.key is None and spec.workdir is None:
        return server.submit_batches.submit(user, spec, warnings)
    return _submit_alone(server, user, spec, warnings, keyed)


def queued(server: Server, user: UserRow, spec: JobSpec, keyed: Keyed = Keyed()) -> Future[idempotency.Answer] | None:
    """``submit`` for a caller on an event loop, where it can be: the submit queued for the
    server's batches and its answer to come, so that no thread of the caller's waits for it
    (issue 33: a thread hop per submit was a tenth of the interpreter under 20 clients).
    None where ``submit`` must be called instead: a key or a working directory (a
    transaction of their own), or a backend that checks its users' OS accounts (a look-up
    that may block)."""
    job_service.check_backend(spec, server.backend.name)
    if (server.submit_batches is None or keyed.key is not None or spec.workdir is not None
            or isinstance(server.backend, TaskAccountCheck)):
        return None
    return server.submit_batches.queue(user, spec, _warnings(server, spec))


def _submit_alone(server: Server, user: UserRow, spec: JobSpec, warnings: list[str],
                  keyed: Keyed = Keyed()) -> idempotency.Answer:
    def create(session: Session, nodes: list[NodeState]) -> JobRow:
        return job_service.submit_job(session, user, spec, clock=server.clock, nodes=nodes,
                                      limits=server.submit_limits)

    return _once(server, user, keyed, create, lambda row: warnings)


def _submit_many(session: Session, server: Server,
                 batch: Sequence[tuple[UserRow, JobSpec, list[str]]]) -> list[idempotency.Answer | Exception]:
    """The submits of a batch, in the batch's session (``submit_batches.py``), each checked
    as if alone after those before it: an answer each, or the refusal of its checks (nothing
    of it written). What the checks read is read once for the batch (``submit_facts.py``),
    and the jobs go to the store in one INSERT, their events in another."""
    facts = SubmitFacts(session, [user.id for user, _, _ in batch],
                        count_waiting=server.submit_limits.max_waiting_jobs is not None)
    nodes = server.node_states()
    outcomes: list[idempotency.Answer | Exception | None] = []  # None: made, answered once it has its id
    made: list[tuple[int, UserRow, list[str], JobRow, Event]] = []
    # The checks read no job of this batch from the store (``facts`` counts them), so none
    # is written before the last is checked: the batch's transaction takes SQLite's one
    # writer at this flush, not at the second submit's first query. Autoflushed, the
    # writer was held through the checks of the rest of the batch — 0.2-1.3 s under a
    # burst (issue 33), while the controller's writes and the next batch waited.
    with session.no_autoflush:
        for user, spec, warnings in batch:
            try:
                job, event = job_service.new_job(session, user, spec, clock=server.clock, nodes=nodes,
                                                 limits=server.submit_limits, facts=facts)
            except (ServiceError, SpecError) as refused:  # its checks: nothing of it written
                outcomes.append(refused)
                continue
            made.append((len(outcomes), user, warnings, job, event))
            outcomes.append(None)
    session.flush()
    for index, user, warnings, job, event in made:
        record_event(session, job.id, event)
        outcomes[index] = idempotency.Answer(201, submit_result(job, user.name, warnings).model_dump_json(), job.id)
    return [outcome for outcome in outcomes if outcome is not None]


def submit_batches(server: Server) -> SubmitBatches:
    """Group commit for ``server``'s submits (its ``submit_batches``)."""
    return SubmitBatches(server, _submit_many, _submit_alone)


def clone(server: Server, user: UserRow, job_id: int, changes: job_service.CloneChanges,
          keyed: Keyed = Keyed()) -> idempotency.Answer:
    """Queue a copy of job ``job_id`` with ``changes`` (at most once per key), its secrets
    kept on the server: the answer, a ``SubmitResult``."""
    check_task_account(server, user)

    def create(session: Session, nodes: list[NodeState]) -> JobRow:
        row = job_service.clone_job(session, user, job_id, changes, specs=server.specs, clock=server.clock,
                                    nodes=nodes, limits=server.submit_limits)
        job_service.check_backend(server.specs.of(row), server.backend.name)  # refused: rolled back
        return row

    return _once(server, user, keyed, create,
                 lambda row: _warnings(server, server.specs.of(row)))


def _once(server: Server, user: UserRow, keyed: Keyed, create: _Create, warnings: _Warnings) -> idempotency.Answer:
    nodes = server.node_states()  # before the submit's own session: it may open one to refresh

    def made(session: Session) -> idempotency.Answer:
        row = create(session, nodes)
        return idempotency.Answer(201, submit_result(row, user.name, warnings(row)).model_dump_json(), row.id)

    answer = idempotency.submit_once(server.db, user, keyed.key, keyed.fingerprint, made, now=server.clock.now,
                                     keep=_keep(server))
    if not answer.replayed:
        server.wake_controller()
    return answer


class _Create(Protocol):
    def __call__(self, session: Session, nodes: list[NodeState], /) -> JobRow: ...


class _Warnings(Protocol):
    def __call__(self, row: JobRow, /) -> list[str]: ...
