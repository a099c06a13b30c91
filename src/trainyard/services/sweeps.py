"""Sweeps behind every door (API, CLI through it, portal): submit, list, show, stop, clone.

A sweep's jobs are made in one transaction, each through the same checks as any submit
(``jobs.submit_job``): one refused member refuses the whole sweep, and nothing is made. With
an ``Idempotency-Key`` the sweep is made at most once (``idempotency.py``; the key's row names
its first member). Access is as for jobs: a user sees and acts on their own sweeps, an admin
on everyone's; another user's sweep is "not found".
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard.core.states import FINAL_JOB_STATES, JobState
from trainyard.schemas.sweeps import SweepDetail, SweepMember, SweepPage, SweepStopResult, SweepSummary
from trainyard.services import idempotency, sweep_metrics
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict, Invalid, NotFound, ServiceError
from trainyard.services.server import Server
from trainyard.services.submission import Keyed, check_task_account
from trainyard.services.views import _pending
from trainyard.spec import sweeps as sweep_spec
from trainyard.spec.errors import FieldError, SpecError, show
from trainyard.spec.loading import validate_job
from trainyard.spec.models import JobSpec
from trainyard.spec.plaindata import plain_data
from trainyard.store.queries import sweeps as sweep_queries
from trainyard.store.rows import SweepMemberRow, SweepRow, UserRow

MAX_PAGE = 200
STOP_RETRIES = 3


def member_specs(document: Any) -> tuple[sweep_spec.Sweep, list[JobSpec]]:
    """The sweep a job file describes and each member's job, validated (SpecError at the
    field; a member's own problem names its index and point). Its id is not known yet: the
    members' ``TRAINYARD_SWEEP_ID`` is written as 0 here and set when the sweep is made."""
    sweep, rest = sweep_spec.split(document)
    if sweep is None:
        raise SpecError.single(sweep_spec.SWEEP, "this job file has no sweep section: add one, e.g. "
                                                 "sweep: {grid: {lr: [0.1, 0.01]}}, or submit it as a job")
    specs = []
    for index, point in enumerate(sweep.points):
        try:
            specs.append(validate_job(sweep_spec.member_document(rest, point, index, 0)))
        except SpecError as error:  # the first member refused: the file's own problems, or its point's
            where = f"the sweep's job {index} ({show(point, 60)})"
            raise SpecError([FieldError(e.path, f"{e.message} (in {where})") for e in error.errors]) from None
    return sweep, specs


def submit(server: Server, user: UserRow, document: Any, keyed: Keyed = Keyed()) -> idempotency.Answer:
    """Make the sweep ``document`` (a job file with a ``sweep`` section) describes, every
    member or none: the answer, a ``SweepDetail``."""
    if keyed.key is not None:
        earlier = idempotency.earlier_answer(server.db, user, keyed.key, keyed.fingerprint, now=server.clock.now(),
                                             keep=_keep(server))
        if earlier is not None:
            return earlier
    document = plain_data(document)
    sweep, _ = member_specs(document)  # before anything is made: the file's problems, all of them
    check_task_account(server, user)
    nodes = server.node_states()

    def made(session: Session) -> idempotency.Answer:
        row = _make(session, server, user, document, sweep, nodes)
        detail = _detail(server, row, metrics=False)
        return idempotency.Answer(201, detail.model_dump_json(), row.members[0].job_id)

    answer = idempotency.submit_once(server.db, user, keyed.key, keyed.fingerprint, made, now=server.clock.now,
                                     keep=_keep(server))
    if not answer.replayed:
        server.wake_controller()
    return answer


def _keep(server: Server) -> timedelta:
    return timedelta(hours=server.idempotency_key_hours)


def _make(session: Session, server: Server, user: UserRow, document: dict[str, Any], sweep: sweep_spec.Sweep,
          nodes: Any) -> SweepRow:
    _, rest = sweep_spec.split(document)
    name = rest.get("name") if isinstance(rest.get("name"), str) else "sweep"
    row = SweepRow(user_id=user.id, name=name, spec=document, parallel=sweep.parallel,
                   metric=None if sweep.metric is None else sweep.metric.as_data(), created_at=server.clock.now())
    session.add(row)
    session.flush()
    for index, point in enumerate(sweep.points):
        spec = validate_job(sweep_spec.member_document(rest, point, index, row.id))
        try:
            job_service.check_backend(spec, server.backend.name)
            job = job_service.submit_job(session, user, spec, clock=server.clock, nodes=nodes,
                                         limits=server.submit_limits)
        except ServiceError as error:
            error.message = f"the sweep's job {index} ({show(point, 60)}): {error.message}"
            raise
        session.add(SweepMemberRow(sweep_id=row.id, index=index, job_id=job.id, params=point))
    session.flush()
    session.refresh(row)
    return row


def _get(session: Session, viewer: UserRow, sweep_id: int) -> SweepRow:
    row = sweep_queries.sweep_by_id(session, sweep_id)
    if row is None or (not viewer.is_admin and row.user_id != viewer.id):
        raise NotFound(f"no sweep {sweep_id}")
    return row


def _summary(row: SweepRow) -> dict[str, Any]:
    states: dict[str, int] = {}
    for member in row.members:
        states[member.job.state] = states.get(member.job.state, 0) + 1
    return {
        "id": row.id, "name": row.name, "user": row.user.name, "createdAt": row.created_at,
        "size": len(row.members), "parallel": row.parallel, "metric": row.metric, "states": states,
        "ended": all(m.job.state in FINAL_JOB_STATES for m in row.members),
    }


def _detail(server: Server, row: SweepRow, *, metrics: bool = True) -> SweepDetail:
    reader = sweep_metrics.MetricReader(server, row.metric) if metrics and row.metric else None
    members = [
        SweepMember(index=m.index, params=m.params, jobId=m.job_id, name=m.job.name, state=JobState(m.job.state),
                    pending=_pending(m.job), metric=None if reader is None else reader.value(m.job))
        for m in row.members
    ]
    return SweepDetail(**_summary(row), members=members)


def list_sweeps(server: Server, viewer: UserRow, *, user: str | None = None, limit: int = 50,
                before: int | None = None) -> SweepPage:
    """The newest sweeps ``viewer`` may see (an admin: everyone's, or ``user``'s)."""
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid(f"limit must be 1 to {MAX_PAGE}", details=[{"path": "limit", "message": "out of range"}])
    with server.db.session() as session:
        rows = sweep_queries.sweeps_page(session, owner_id=None if viewer.is_admin else viewer.id,
                                         owner_name=user if viewer.is_admin else None, before=before,
                                         limit=limit + 1)
        page = [SweepSummary(**_summary(r)) for r in rows[:limit]]
    return SweepPage(items=page, next=page[-1].id if len(rows) > limit else None)


def show_sweep(server: Server, viewer: UserRow, sweep_id: int) -> SweepDetail:
    """The sweep and each member: index, point, state and metric."""
    with server.db.session() as session:
        return _detail(server, _get(session, viewer, sweep_id))


def stop_sweep(server: Server, viewer: UserRow, sweep_id: int) -> SweepStopResult:
    """Stop every member still queued or running, in one transaction (waiting members
    first, so that none starts meanwhile); tried again when the controller moved a member."""
    for attempt in range(STOP_RETRIES):
        try:
            with server.db.session() as session:
                row = _get(session, viewer, sweep_id)
                members = sorted(row.members, key=lambda m: (m.job.state != JobState.WAITING, m.index))
                stopped: list[int] = []
                refused: dict[int, str] = {}
                for member in members:
                    if member.job.state in FINAL_JOB_STATES:
                        refused[member.job_id] = f"ended already ({member.job.state})"
                        continue
                    job_service.request_stop(session, viewer, member.job_id, clock=server.clock,
                                             reason=f"stop sweep {sweep_id}")
                    stopped.append(member.job_id)
            break
        except StaleDataError:
            if attempt == STOP_RETRIES - 1:
                raise Conflict(f"sweep {sweep_id}'s jobs kept changing while it was being stopped; try again") from None
    server.wake_controller()
    return SweepStopResult(stopped=sorted(stopped), refused=refused)


def clone_sweep(server: Server, viewer: UserRow, sweep_id: int, keyed: Keyed = Keyed()) -> idempotency.Answer:
    """Make the sweep again from its job file (its secrets kept on the server), as ``viewer``."""
    with server.db.session() as session:
        document = _get(session, viewer, sweep_id).spec
    return submit(server, viewer, document, keyed)


def sweeps_of_jobs(server: Server, job_ids: list[int]) -> dict[int, tuple[int, int]]:
    """The sweep each of ``job_ids`` belongs to, and its index there (a job of no sweep is
    left out). Ask only of jobs the viewer may see: a sweep is its owner's, as its jobs are."""
    if not job_ids:
        return {}
    with server.db.session() as session:
        return sweep_queries.sweeps_of_jobs(session, job_ids)


def params_text(params: dict[str, Any]) -> str:
    """A point as one line: ``lr=0.1 batch=32``."""
    return " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in params.items())

