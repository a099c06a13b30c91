"""Job operations behind the API: submit, clone, list, show, stop, and the cluster's nodes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.names import DEFAULT_VC
from trainyard.core.priorities import Priority
from trainyard.core.settings import DEFAULT_JOB_RENDERED_MAX_KB, DEFAULT_MAX_WAITING_JOBS_PER_USER
from trainyard.core.states import FINAL_JOB_STATES, JobState
from trainyard.scheduler.schedule import never_fits
from trainyard.scheduler.snapshot import NodeState, TaskRequest
from trainyard.scheduler.whole_nodes import resolve_tasks
from trainyard.schemas.jobs import JobDetail
from trainyard.services import node_view, notices, workdirs
from trainyard.services.admin import Borrowing, guaranteed_quotas, may_use_vc, vc_borrowing
from trainyard.services.datasets import check_dataset_uses
from trainyard.services.dependencies import check_dependencies, dependency_views
from trainyard.services.environment_access import check_job_environments
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound, ServiceError, TooMany
from trainyard.services.requests import task_requests
from trainyard.services.specs import StoredSpecs
from trainyard.services.storages import check_storage_uses
from trainyard.services.submit_facts import SubmitFacts
from trainyard.services.views import job_detail
from trainyard.spec.checks import rendered_size_errors
from trainyard.spec.errors import SpecError
from trainyard.spec.loading import container_fields, ignored_extras, validate_job
from trainyard.spec.models import JobSpec
from trainyard.spec.templating import MASK, masked_secret_paths, normalized_spec, unmasked
from trainyard.store import events
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import dev_sessions as session_queries
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.queries import workdirs as workdir_queries
from trainyard.store.rows import (
    JobEventRow,
    JobRow,
    NodeRow,
    TaskRow,
    UserRow,
)

MAX_PAGE = 500
STOP_RETRIES = 3  # tries of a stop that lost a race with the controller


@dataclass(frozen=True)
class SubmitLimits:
    """The sizes of what one user submits that the admin bounds (issue 27; settings
    ``job_rendered_max_kb`` and ``max_waiting_jobs_per_user``)."""

    rendered_max_bytes: int = DEFAULT_JOB_RENDERED_MAX_KB * 1024
    max_waiting_jobs: int | None = DEFAULT_MAX_WAITING_JOBS_PER_USER
    # Whether a job over its VC's quota may run borrowed (``scheduler_borrowing``): then
    # only a job bigger than its quota and its VC's borrowing limit together can never start.
    borrowing: bool = True
    # Hosts and networks a job's notice webhook may reach though they are not public
    # (setting ``notify_webhook_allow``; ``monitor.webhooks``).
    webhook_allow: tuple[str, ...] = ()


DEFAULT_SUBMIT_LIMITS = SubmitLimits()


def backend_warnings(spec: JobSpec, backend: str, gpu_share_note: str | None = None) -> list[str]:
    """What the job file asks for that this backend keeps but does not act on; where a role
    asks for part of a GPU, whether the backend holds it to that (``gpu_share_note``, from
    ``backends.base.gpu_share_note``: None, the backend runs no task; "", it does, but for
    tasks in containers; else why not)."""
    warnings = ignored_extras(spec)
    warnings += [f"{path}: kept, but not used: Trainyard sets its containers' options itself"
                 for path in container_fields(spec)]
    shared = [name for name, r in spec.taskRoles.items() if r.resourcePerInstance.gpu % 1]
    if gpu_share_note:
        warnings += [gpu_share_note] if shared else []
    elif gpu_share_note is not None:
        warnings += [f"taskRoles.{name}: its GPU share is not enforced in a container (MPS holds bare tasks "
                     f"to their share); it can use the whole device" for name in shared if spec.role_image(name)]
    return warnings


# Backends that resize an elastic job's attempt in place (``controller/elastic.py``), each
# proven on a real DDP job: the local backend, and Slurm (each elastic worker a Slurm job of
# its own, ``backends/slurm/backend.py``). The simulated one (``yard sim``) runs no tasks.
ELASTIC_BACKENDS = ("local", "slurm")


def check_backend(spec: JobSpec, backend: str) -> None:
    """Refuse what this backend cannot run: an elastic role, on a backend that cannot resize."""
    role = spec.elastic_role
    if role is not None and backend not in ELASTIC_BACKENDS:
        raise Invalid(
            f"taskRoles.{role}.instances: elastic jobs run on the {', '.join(ELASTIC_BACKENDS)} backend for now, "
            f"not on {backend}: give the role a fixed number of instances",
            details=[{"path": f"taskRoles.{role}.instances",
                      "message": f"elastic jobs are not supported on the {backend} backend yet"}],
        )


def check_fits(nodes: list[NodeState], spec: JobSpec) -> None:
    """Refuse, with the numbers, a job that could never run on these nodes."""
    problems = never_fits(nodes, list(task_requests(spec)))
    if problems:
        raise Invalid(
            "the job can never run on this cluster: " + "; ".join(problems),
            details=[{"path": p.split(":", 1)[0] if p.startswith("taskRoles.") else "taskRoles",
                      "message": p} for p in problems],
        )


def check_within_vc_quota(
    session: Session, spec: JobSpec, requests: list[TaskRequest], *, borrowing: bool = True,
    facts: SubmitFacts | None = None,
) -> None:
    """Refuse a guaranteed job bigger than its VC's whole quota and what it may borrow: it
    could never start (with no borrowing limit, it may always borrow, when GPUs are idle).
    ``facts``: the VCs as a batch of submits read them once (else read here)."""
    if Priority(spec.priority).is_opportunistic:
        return
    quotas = guaranteed_quotas(session) if facts is None else facts.vc_quotas
    vc = spec.defaults.virtualCluster
    if vc not in quotas:
        return  # no VCs defined: no quotas
    requests = [t for t in requests if t.gpu_milli > 0]
    need = sum(t.gpu_milli for t in requests)
    if not need:
        return
    quota = quotas[vc][0]
    accepted = set() if any(not t.gpu_models for t in requests) else {m for t in requests for m in t.gpu_models}
    total = sum(gpus for model, gpus in quota.items() if not accepted or model in accepted)
    limit = ((vc_borrowing(session) if facts is None else facts.vc_borrowing).get(vc, Borrowing()).borrow_limit
             if borrowing else 0)
    if borrowing and limit is None:
        return
    models = accepted or set(node_queries.gpus_by_model(session) if facts is None else facts.gpus_by_model)
    most = total + (limit or 0) * len(models)
    if need > most * 1000:
        of = f" of {'/'.join(sorted(accepted))}" if accepted else ""
        raise_it = (
            f"to lower other VCs' quotas (VC {vc} is guaranteed the GPUs no other VC is; see `yard vc list`)"
            if vc == DEFAULT_VC
            else f"to raise the quota (`yard vc quota {vc} --gpus N`)"
        )
        may_borrow = f" and may borrow {limit} of each model" if limit else ""
        raise Invalid(
            f"the job needs {need / 1000:g} GPU{of} but VC {vc} guarantees {total}{may_borrow}: it could never "
            f"start at priority {spec.priority}; submit it with `priority: oppo` to use idle GPUs, or ask an admin "
            f"{raise_it}",
            details=[{"path": "defaults.virtualCluster", "message": f"VC {vc} guarantees {total} GPU{of}{may_borrow}"}],
        )


def check_within_user_quota(session: Session, user: UserRow, spec: JobSpec, requests: list[TaskRequest],
                            facts: SubmitFacts | None = None) -> None:
    """Refuse a job bigger than its owner may hold at its priority: it could never start."""
    if facts is None:
        row = user_queries.user_quota(session, user.id, str(spec.priority))
        limit = None if row is None else row.gpu_milli
    else:
        limit = facts.user_quota_milli(user.id, str(spec.priority))
    if limit is None:
        return
    need = sum(t.gpu_milli for t in requests)
    if need > limit:
        raise Invalid(
            f"the job needs {need / 1000:g} GPU but user {user.name} may hold at most {limit / 1000:g} "
            f"at priority {spec.priority}: it could never start; submit it at another priority, or ask an admin "
            f"to raise the limit (`yard quota set {user.name} --priority {spec.priority} --gpus N`)",
            details=[{"path": "priority", "message": f"user {user.name} may hold at most "
                                                     f"{limit / 1000:g} GPU at {spec.priority}"}],
        )


def check_vc_access(session: Session, user: UserRow, vc: str) -> None:
    """DESIGN's "may this user use that VC?": granted to them, to a group of theirs, or admin."""
    if may_use_vc(session, user, vc):
        return
    if vc_queries.vc_named(session, vc) is None:
        raise Invalid(f"no virtual cluster named {vc!r}; see `yard vc list`",
                      details=[{"path": "defaults.virtualCluster", "message": "unknown virtual cluster"}])
    raise Forbidden(f"user {user.name} may not submit to virtual cluster {vc!r}; an admin can allow it "
                    f"with `yard vc grant {vc} {user.name}`",
                    details=[{"path": "defaults.virtualCluster", "message": f"not granted to {user.name}"}])


def check_no_masked_secrets(spec: JobSpec) -> None:
    """Refuse secrets copied from a shown job: the mask would run as the secret's value."""
    paths = masked_secret_paths(spec)
    if paths:
        message = (f"{MASK} is how Trainyard shows a secret, not a secret: write the value, or, to run a "
                   "job again with its secrets kept, use `yard clone ID` (POST /jobs/{id}/clone)")
        raise Invalid(f"{paths[0]}: {message}", details=[{"path": p, "message": message} for p in paths])


def check_rendered_size(spec: JobSpec, limits: SubmitLimits) -> None:
    """Refuse, at the field, a job whose commands and env render past the cluster's limit:
    at launch they become its script and environment, on disk and in the server's memory."""
    problems = rendered_size_errors(spec, limits.rendered_max_bytes, "job_rendered_max_kb")
    if problems:
        raise SpecError(problems)


def check_waiting_jobs(session: Session, user: UserRow, limits: SubmitLimits,
                       facts: SubmitFacts | None = None) -> None:
    """Refuse (429) a job past the number of waiting jobs one user may have."""
    limit = limits.max_waiting_jobs
    if limit is None:
        return
    waiting = job_queries.waiting_job_count(session, user.id) if facts is None else facts.waiting(user.id)
    if waiting >= limit:
        raise TooMany(
            f"user {user.name} has {waiting:,} jobs waiting, the most this cluster allows "
            f"(max_waiting_jobs_per_user: {limit:,}): wait until some start, or stop some "
            "(`yard stop ID`), then submit again",
            details=[{"path": "<job>", "message": f"at most {limit:,} waiting jobs per user"}],
        )


def check_submittable(session: Session, user: UserRow, spec: JobSpec, *, nodes: list[NodeState] | None = None,
                      limits: SubmitLimits = DEFAULT_SUBMIT_LIMITS, facts: SubmitFacts | None = None) -> None:
    """Every check a submit makes before it queues the job; a dry run makes exactly these.
    ``facts``: what a batch of submits read once for all of them (``submit_facts.py``)."""
    check_rendered_size(spec, limits)
    check_waiting_jobs(session, user, limits, facts)
    check_no_masked_secrets(spec)
    notices.check_job_notify(spec, limits.webhook_allow)
    check_vc_access(session, user, spec.defaults.virtualCluster)
    check_storage_uses(session, user, spec)
    check_dataset_uses(session, user, spec)
    inventory = node_view.node_states(session, in_use=False) if nodes is None else nodes
    check_fits(inventory, spec)
    # A whole-node task counts the GPUs of the smallest node that suits it (a lower bound).
    requests = list(resolve_tasks(task_requests(spec), inventory))
    check_within_vc_quota(session, spec, requests, borrowing=limits.borrowing, facts=facts)
    check_within_user_quota(session, user, spec, requests, facts)
    check_job_environments(session, user, spec)
    check_dependencies(session, user, spec)
    if spec.workdir is not None:
        workdirs.usable(session, user, spec.workdir)


def submit_job(
    session: Session,
    user: UserRow,
    spec: JobSpec,
    *,
    clock: Clock,
    nodes: list[NodeState] | None = None,
    cloned_from: int | None = None,
    limits: SubmitLimits = DEFAULT_SUBMIT_LIMITS,
) -> JobRow:
    """Queue a job as WAITING, or refuse it if it could never fit the cluster.

    ``nodes`` is the inventory to check against; by default it is read from the store.
    ``cloned_from`` names the job this one copies, for its history.
    """
    job, event = new_job(session, user, spec, clock=clock, nodes=nodes, cloned_from=cloned_from, limits=limits)
    session.flush()
    record_event(session, job.id, event)
    return job


def new_job(
    session: Session,
    user: UserRow,
    spec: JobSpec,
    *,
    clock: Clock,
    nodes: list[NodeState] | None = None,
    cloned_from: int | None = None,
    limits: SubmitLimits = DEFAULT_SUBMIT_LIMITS,
    facts: SubmitFacts | None = None,
) -> tuple[JobRow, transitions.Event]:
    """``submit_job``'s checks and its job, added to ``session`` but not yet written, with
    the event of its submit: the caller flushes (the row gets its id) and records the event
    (``record_event``), so that a batch of submits writes its jobs in one statement and
    their events in another (``submission.py``). ``facts``: what the batch read once."""
    check_submittable(session, user, spec, nodes=nodes, limits=limits, facts=facts)
    if spec.workdir is not None and user.is_admin:  # checked above; an admin's clone of another's job
        workdirs.usable(session, user, spec.workdir, clock=clock)  # records it as theirs while it runs
    job = JobRow(
        name=spec.name,
        user_id=user.id,  # not the relationship: ``user`` may be shared across sessions
        vc=spec.defaults.virtualCluster,
        priority=str(spec.priority),
        spec=normalized_spec(spec),
        grace_seconds=float(spec.stopGracePeriodSeconds),
        max_runtime_seconds=spec.maxRunTimeSeconds,
        suspendable=spec.suspendable,
        watchdog_seconds=spec.watchdogSeconds,
        workdir=spec.workdir,
        elastic_max=spec.taskRoles[spec.elastic_role].maxInstances if spec.elastic_role else None,
    )
    event = transitions.submit(job, user.name, clock.now(), cloned_from=cloned_from)
    session.add(job)
    if facts is not None:
        facts.made(user.id)
    return job, event


@dataclass(frozen=True)
class CloneChanges:
    """What a clone changes of its original; None keeps the original's."""

    document: Any = None  # a whole job file as data, masked values to be filled from the original
    name: str | None = None
    vc: str | None = None
    priority: str | None = None


def clone_spec(original: JobSpec, changes: CloneChanges) -> JobSpec:
    """The job a clone submits: the original's (secrets included), or the given document
    with what it still shows masked filled from the original; then the named changes."""
    document = normalized_spec(original) if changes.document is None else unmasked(changes.document, original)
    if isinstance(document, dict):  # anything else is refused by validate_job, at the document
        if changes.name is not None:
            document["name"] = changes.name
        if changes.priority is not None:
            document["priority"] = changes.priority
        if changes.vc is not None:
            defaults = document.get("defaults")
            document["defaults"] = {**(defaults if isinstance(defaults, dict) else {}), "virtualCluster": changes.vc}
    return validate_job(document)


def clone_job(
    session: Session,
    user: UserRow,
    job_id: int,
    changes: CloneChanges,
    *,
    specs: StoredSpecs,
    clock: Clock,
    nodes: list[NodeState] | None = None,
    limits: SubmitLimits = DEFAULT_SUBMIT_LIMITS,
) -> JobRow:
    """Submit a copy of job ``job_id`` as ``user`` (its owner, or an admin), keeping the
    original's secrets, which never leave the server; the copy's history names the original."""
    original = _not_a_session(session, get_job(session, user, job_id))
    spec = clone_spec(specs.of(original), changes)
    return submit_job(session, user, spec, clock=clock, nodes=nodes, cloned_from=original.id, limits=limits)


def _not_a_session(session: Session, job: JobRow) -> JobRow:
    """A JupyterLab session is started anew, never copied: a copy would be a plain job that
    no ``/sessions/`` address opens, holding the original's JupyterLab token."""
    if session_queries.dev_session(session, job.id) is not None:
        raise Conflict(f"job {job.id} is a JupyterLab session: start another with `yard dev` or the "
                       "portal's Notebooks page, not by cloning it")
    return job


def check_clone(
    session: Session,
    user: UserRow,
    job_id: int,
    changes: CloneChanges,
    *,
    specs: StoredSpecs,
    nodes: list[NodeState] | None = None,
    limits: SubmitLimits = DEFAULT_SUBMIT_LIMITS,
) -> JobSpec:
    """The dry run of ``clone_job``: the job the clone would submit, after the checks a
    submit makes. It holds the original's secrets: never show it unmasked."""
    spec = clone_spec(specs.of(_not_a_session(session, get_job(session, user, job_id))), changes)
    check_submittable(session, user, spec, nodes=nodes, limits=limits)
    return spec


# How a page of jobs is sorted: by id (submission), either way, or by a column (then newest
# first), "-column" the other way.
JOB_ORDERS = ("newest", "oldest", *(f"{sign}{column}" for column in job_queries.SORTABLE_COLUMNS for sign in ("", "-")))


def list_jobs(
    session: Session,
    viewer: UserRow,
    *,
    state: str | None = None,
    user: str | None = None,
    vc: str | None = None,
    text: str | None = None,
    order: str = "newest",
    limit: int = 50,
    before: int | None = None,
    after: int | None = None,
) -> tuple[list[JobRow], int | None]:
    """One page of jobs, newest first (``order="oldest"``: oldest first; ``"state"``, ``"-user"``
    …: by that column, see ``JOB_ORDERS``); a non-admin sees only their own jobs. ``text``
    keeps jobs whose name contains it (any case). The cursor returned is the next page's
    ``after`` when oldest first, else its ``before``."""
    limit = max(1, min(limit, MAX_PAGE))
    for name, value in (("user", user), ("vc", vc), ("state", state), ("name", text)):
        if value is not None and "\x00" in value:
            raise Invalid(f"{name} contains a NUL character", details=[{"path": name, "message": "NUL"}])
    if order not in JOB_ORDERS:
        raise Invalid(f"unknown order {order!r}; use one of {', '.join(JOB_ORDERS)}",
                      details=[{"path": "order", "message": "unknown order"}])
    states = None
    if state is not None:
        states = [s.strip().upper() for s in state.split(",") if s.strip()]
        unknown = [s for s in states if s not in JobState.__members__]
        if unknown:
            raise Invalid(
                f"unknown state {unknown[0]!r}; use one of {', '.join(JobState)}",
                details=[{"path": "state", "message": "unknown state"}],
            )
    rows = job_queries.page_of_jobs(
        session, limit=limit + 1, owner_id=None if viewer.is_admin else viewer.id, owner_name=user,
        states=states, vc=vc, name_contains=text.strip() if text else None, oldest_first=order == "oldest",
        sort_by=order.lstrip("-") if order not in ("newest", "oldest") else None, descending=order.startswith("-"),
        before=before, after=None if order not in ("newest", "oldest") else after,
    )
    next_cursor = rows[limit - 1].id if len(rows) > limit else None
    return rows[:limit], next_cursor


def get_job(session: Session, viewer: UserRow, job_id: int, *, full: bool = False) -> JobRow:
    """The job, if ``viewer`` may see it; another user's job is reported as not found."""
    job = job_queries.job_by_id(session, job_id, full=full)
    if job is None or (not viewer.is_admin and job.user_id != viewer.id):
        raise NotFound(f"no job {job_id}")
    return job


def job_events(session: Session, job: JobRow) -> list[JobEventRow]:
    return events.job_events(session, job.id)


def describe_job(session: Session, viewer: UserRow, job_id: int, *, specs: StoredSpecs, backend: str,
                 now: datetime, gpu_share_note: str | None = None) -> JobDetail:
    """The job in full as ``viewer`` may see it (its secrets masked): what ``GET /jobs/{id}``
    answers and the job's page shows, less its directory's disk use."""
    row = get_job(session, viewer, job_id, full=True)
    spec = specs.of(row)
    detail = job_detail(row, job_events(session, row), backend_warnings(spec, backend, gpu_share_note), spec=spec,
                        now=now)
    if row.workdir is not None and (sent := workdir_queries.owned(session, row.user_id, row.workdir)) is not None:
        detail.workdir = workdirs.view(sent)
    return detail.model_copy(update={"dependencies": dependency_views(session, spec)})


def request_stop(
    session: Session, viewer: UserRow, job_id: int, *, clock: Clock, reason: str = "", because: str = ""
) -> JobRow:
    """Stop a job: a waiting job stops at once; a running one is signalled by the controller.
    ``reason`` (e.g. "delete virtual cluster vision") is added to the job's event;
    ``because`` (e.g. an alert's rule and message) to its state message as well, to tell its
    owner why."""
    job = get_job(session, viewer, job_id)
    if job.state in FINAL_JOB_STATES:
        raise Conflict(f"job {job_id} has already ended ({job.state})")
    if job.state == JobState.STOPPING:
        return job
    current = None
    if job.state != JobState.WAITING:  # a waiting job's attempts (if any) have all ended
        current = next((a for a in job.attempts if a.number == job.attempt), None)
    requested, *final = transitions.request_stop(job, current, viewer.name, clock.now(), because=because)
    record_event(session, job.id, replace(requested, message=f"{requested.message} to {reason}") if reason
                 else requested)
    for event in final:
        record_event(session, job.id, event)
    return job


def stop_job(db: Database, viewer: UserRow, job_id: int, *, clock: Clock, because: str = "") -> None:
    """``request_stop`` in its own transaction, tried again when the controller moved the job
    meanwhile (placed or finished it: the row's version changed under us)."""
    for attempt in range(STOP_RETRIES):
        try:
            with db.session() as session:
                request_stop(session, viewer, job_id, clock=clock, because=because)
            return
        except StaleDataError:
            if attempt == STOP_RETRIES - 1:
                raise


@dataclass(frozen=True)
class StopOutcome:
    """What stopping several jobs did: those told to stop, and why each other one was not."""

    stopped: list[int]
    refused: dict[int, str]


def stop_jobs(db: Database, viewer: UserRow, job_ids: list[int], *, clock: Clock) -> StopOutcome:
    """Stop each job as ``stop_job`` would, one at a time: one job that cannot be stopped
    (ended already, or not the viewer's to stop) does not keep the others running."""
    stopped: list[int] = []
    refused: dict[int, str] = {}
    for job_id in dict.fromkeys(job_ids):
        try:
            stop_job(db, viewer, job_id, clock=clock)
            stopped.append(job_id)
        except ServiceError as exc:
            refused[job_id] = exc.message
        except StaleDataError:
            refused[job_id] = "the job kept changing while it was being stopped; try again"
    return StopOutcome(stopped, refused)


def active_tasks(session: Session) -> list[TaskRow]:
    """Tasks that hold resources: placed and not yet ended."""
    return node_queries.unfinished_tasks(session)


def visible_job_ids(session: Session, viewer: UserRow, job_ids: set[int]) -> set[int] | None:
    """Which of ``job_ids`` ``viewer`` may see (None: all of them, for an admin)."""
    if viewer.is_admin:
        return None
    return job_queries.owned_job_ids(session, viewer.id, job_ids)


def list_nodes(session: Session) -> list[NodeRow]:
    return node_queries.all_nodes(session)
