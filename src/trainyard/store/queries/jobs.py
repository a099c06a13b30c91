"""Queries about jobs, their attempts and tasks: the API's pages, the controller's cycles."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, bindparam, case, func, or_, select, update
from sqlalchemy.orm import Session, aliased, selectinload

from trainyard.core.states import FINAL_JOB_STATES, QUEUED_JOB_STATES, AttemptState, JobState, TaskState
from trainyard.core.transitions import EventKind
from trainyard.store.rows import AttemptRow, JobEventRow, JobRow, TaskRow, UserRow

# Ids per ``IN (...)`` list: well below SQLite's and PostgreSQL's bind-parameter limits.
CHUNK = 500
ACTIVE = (JobState.WAITING, JobState.SUSPENDED, JobState.RUNNING, JobState.STOPPING)
HOLDING = (JobState.RUNNING, JobState.STOPPING)  # jobs whose current attempt may hold resources
UNFINISHED_TASKS = (TaskState.WAITING, TaskState.RUNNING)
FINISHED_TASKS = tuple(state.value for state in TaskState if state.is_final)


def queued() -> ColumnElement[bool]:
    """The jobs the scheduler may place: waiting, or suspended and not held by anyone."""
    return and_(JobRow.state.in_(QUEUED_JOB_STATES), JobRow.held_by.is_(None))


def chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), CHUNK):
        yield ids[i : i + CHUNK]


# -- the API's -----------------------------------------------------------------------------


def job_by_id(session: Session, job_id: int, *, full: bool = False) -> JobRow | None:
    """The job; ``full`` loads its attempts and their tasks with it."""
    if not full:
        return session.get(JobRow, job_id)
    query = select(JobRow).where(JobRow.id == job_id)
    query = query.options(selectinload(JobRow.attempts).selectinload(AttemptRow.tasks))
    return session.scalar(query)


def running_task(session: Session, job_id: int, role: str, index: int) -> TaskRow | None:
    """Task ``role/index`` of the job while it runs (its newest run if ever two did)."""
    return session.scalar(select(TaskRow).where(
        TaskRow.job_id == job_id, TaskRow.role == role, TaskRow.index == index,
        TaskRow.state == TaskState.RUNNING).order_by(TaskRow.id.desc()).limit(1))


def page_of_jobs(
    session: Session,
    *,
    limit: int,
    owner_id: int | None = None,
    owner_name: str | None = None,
    states: Sequence[str] | None = None,
    vc: str | None = None,
    name_contains: str | None = None,
    oldest_first: bool = False,
    sort_by: str | None = None,
    descending: bool = False,
    before: int | None = None,
    after: int | None = None,
) -> list[JobRow]:
    """Up to ``limit`` jobs, newest first (or oldest first), older than job ``before`` and
    newer than job ``after``, filtered by owner (id or name), states, VC and text in the name
    (any case). Ordered by id alone, so that each filter's index (state, user or VC, then id)
    serves the order and the cursor; the text filter is checked on the rows read in that order.

    ``sort_by`` (``name``, ``user``, ``vc``, ``state``) orders by that column instead (then
    newest first), ``descending`` the other way; ``before`` is then the last job of the
    previous page, and the page goes on after it in that order (keyset paging: the column's
    value is that job's, read in the same query)."""
    owner = aliased(UserRow)
    query = select(JobRow).limit(limit).options(selectinload(JobRow.attempts))
    if owner_name is not None or sort_by == "user":
        query = query.join(owner, JobRow.user_id == owner.id)
    if owner_id is not None:
        query = query.where(JobRow.user_id == owner_id)
    if owner_name is not None:
        query = query.where(owner.name == owner_name)
    if states is not None:
        query = query.where(JobRow.state.in_(states))
    if vc is not None:
        query = query.where(JobRow.vc == vc)
    if name_contains:
        query = query.where(JobRow.name.icontains(name_contains, autoescape=True))
    if sort_by is None:
        query = query.order_by(JobRow.id.asc() if oldest_first else JobRow.id.desc())
        if before is not None:
            query = query.where(JobRow.id < before)
        if after is not None:
            query = query.where(JobRow.id > after)
        return list(session.scalars(query))
    column = {"name": JobRow.name, "user": owner.name, "vc": JobRow.vc, "state": JobRow.state}[sort_by]
    query = query.order_by(column.desc() if descending else column.asc(), JobRow.id.desc())
    if before is not None:
        last, last_owner = aliased(JobRow), aliased(UserRow)
        last_column = {"name": last.name, "user": last_owner.name, "vc": last.vc, "state": last.state}[sort_by]
        value = (select(last_column).select_from(last).join(last_owner, last.user_id == last_owner.id)
                 .where(last.id == before).scalar_subquery())
        beyond = column < value if descending else column > value
        query = query.where(or_(beyond, and_(column == value, JobRow.id < before)))
    return list(session.scalars(query))


SORTABLE_COLUMNS = ("name", "user", "vc", "state")  # page_of_jobs' sort_by


def waiting_job_count(session: Session, user_id: int) -> int:
    """How many of the user's jobs wait now. On PostgreSQL the user's row is locked first, so
    that two submits of theirs at once count one after the other (SQLite writes one at a time,
    and has no such lock: the statement would only cost the submit a round trip)."""
    if session.get_bind().dialect.name != "sqlite":
        session.execute(select(UserRow.id).where(UserRow.id == user_id).with_for_update())
    query = select(func.count()).select_from(JobRow).where(JobRow.user_id == user_id,
                                                             JobRow.state == JobState.WAITING)
    return int(session.execute(query).scalar_one())


def waiting_job_counts(session: Session, user_ids: Collection[int]) -> dict[int, int]:
    """``waiting_job_count`` of several users in two statements, not two per user: their rows
    locked (on PostgreSQL) in order of id, so that transactions locking several never wait
    for each other in a circle, then their waiting jobs counted."""
    ids = sorted(set(user_ids))
    if not ids:
        return {}
    if session.get_bind().dialect.name != "sqlite":
        session.execute(select(UserRow.id).where(UserRow.id.in_(ids)).order_by(UserRow.id).with_for_update())
    query = (select(JobRow.user_id, func.count()).where(JobRow.user_id.in_(ids), JobRow.state == JobState.WAITING)
             .group_by(JobRow.user_id))
    counts = dict.fromkeys(ids, 0)
    counts.update((user_id, int(count)) for user_id, count in session.execute(query).tuples())
    return counts


def owned_job_ids(session: Session, user_id: int, job_ids: set[int]) -> set[int]:
    """Which of ``job_ids`` belong to the user."""
    if not job_ids:
        return set()
    return set(session.scalars(select(JobRow.id).where(JobRow.id.in_(job_ids), JobRow.user_id == user_id)))


def stoppable_jobs(session: Session, *, user_id: int | None = None, vc: str | None = None) -> list[JobRow]:
    """Waiting, suspended and running jobs (not those already stopping) of a user and/or a
    VC, oldest first: what removing that user or VC would stop."""
    states = (JobState.WAITING, JobState.SUSPENDED, JobState.RUNNING)
    query = select(JobRow).where(JobRow.state.in_(states)).order_by(JobRow.id)
    if user_id is not None:
        query = query.where(JobRow.user_id == user_id)
    if vc is not None:
        query = query.where(JobRow.vc == vc)
    return list(session.scalars(query))


# -- the controller's ------------------------------------------------------------------------


def task_by_id(session: Session, task_id: int) -> TaskRow | None:
    return session.get(TaskRow, task_id)


def jobs_by_ids(session: Session, job_ids: Sequence[int]) -> dict[int, JobRow]:
    rows: dict[int, JobRow] = {}
    for chunk in chunks(job_ids):
        rows.update((r.id, r) for r in session.scalars(select(JobRow).where(JobRow.id.in_(chunk))))
    return rows


def load_jobs_whole(session: Session, job_ids: Sequence[int]) -> list[JobRow]:
    """These jobs with their attempts and tasks, in three queries a chunk. A caller that
    keeps the list while it reads them one by one (``session.get``) finds them in the
    session, instead of a query (and an autoflush) for each; the session holds rows only
    while someone else does."""
    ids = sorted(set(job_ids))
    rows: list[JobRow] = []
    for chunk in chunks(ids):
        query = select(JobRow).where(JobRow.id.in_(chunk))
        rows += session.scalars(query.options(selectinload(JobRow.attempts).selectinload(AttemptRow.tasks))).all()
    return rows


def job_ids_in(session: Session, states: Sequence[str]) -> list[int]:
    """Ids of the jobs in these states (in the database's order)."""
    return list(session.scalars(select(JobRow.id).where(JobRow.state.in_(states))))


def queued_job_ids(session: Session) -> list[int]:
    """Ids of the jobs the scheduler may place (``queued``), in the database's order."""
    return list(session.scalars(select(JobRow.id).where(queued())))


WaitingFacts = tuple[int, dict[str, Any], datetime, str, str, int, float]


def waiting_job_facts(session: Session, job_ids: Sequence[int]) -> Iterator[WaitingFacts]:
    """(id, stored job file, submit time, VC, owner's name, attempt number,
    GPU-seconds attained) of these jobs, read in chunks: what the scheduler needs of a
    waiting job."""
    for chunk in chunks(job_ids):
        query = (
            select(JobRow.id, JobRow.spec, JobRow.submitted_at, JobRow.vc, UserRow.name,
                   JobRow.attempt, JobRow.attained_gpu_seconds)
            .join(UserRow, JobRow.user_id == UserRow.id)
            .where(JobRow.id.in_(chunk))
        )
        for row in session.execute(query):
            yield cast(WaitingFacts, tuple(row))


def lost_on_nodes(session: Session, job_ids: Sequence[int]) -> dict[int, frozenset[str]]:
    """The nodes of each job's latest attempt, for the jobs whose latest attempt was LOST (a
    platform fault: its retry should go elsewhere when it can)."""
    found: dict[int, set[str]] = {}
    for chunk in chunks(job_ids):
        latest = (select(AttemptRow.job_id, func.max(AttemptRow.number).label("number"))
                  .where(AttemptRow.job_id.in_(chunk)).group_by(AttemptRow.job_id).subquery())
        query = (select(AttemptRow.job_id, TaskRow.node)
                 .join(latest, and_(AttemptRow.job_id == latest.c.job_id, AttemptRow.number == latest.c.number))
                 .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
                 .where(AttemptRow.state == AttemptState.LOST))
        for job_id, node in session.execute(query):
            found.setdefault(job_id, set()).add(node)
    return {job_id: frozenset(nodes) for job_id, nodes in found.items()}


def last_failures(session: Session, job_ids: Sequence[int]) -> dict[int, tuple[datetime, int]]:
    """For the jobs whose latest attempt FAILED or was LOST: when it ended, and how many of the
    job's attempts did (a retry's back-off grows with them)."""
    found: dict[int, tuple[datetime, int]] = {}
    ended = (AttemptState.FAILED, AttemptState.LOST)
    for chunk in chunks(job_ids):
        latest = (select(AttemptRow.job_id, func.max(AttemptRow.number).label("number"))
                  .where(AttemptRow.job_id.in_(chunk)).group_by(AttemptRow.job_id).subquery())
        failures = (select(AttemptRow.job_id, func.count().label("failures"))
                    .where(AttemptRow.job_id.in_(chunk), AttemptRow.state.in_(ended))
                    .group_by(AttemptRow.job_id).subquery())
        query = (select(AttemptRow.job_id, AttemptRow.finished_at, failures.c.failures)
                 .join(latest, and_(AttemptRow.job_id == latest.c.job_id, AttemptRow.number == latest.c.number))
                 .join(failures, AttemptRow.job_id == failures.c.job_id)
                 .where(AttemptRow.state.in_(ended), AttemptRow.finished_at.is_not(None)))
        for job_id, finished_at, count in session.execute(query):
            found[job_id] = (finished_at, int(count))
    return found


def write_pending_reasons(session: Session, changes: list[dict[str, Any]]) -> None:
    """One bulk UPDATE of pending reasons (``job``, ``reason``, ``message``, ``short``,
    ``position``, ``eta_at`` per change), only for jobs that still wait: a job placed or stopped meanwhile
    keeps its cleared fields."""
    if not changes:
        return
    jobs = cast(Table, JobRow.__table__)
    session.execute(
        update(jobs)
        # No IN (...) here: an executemany cannot expand one.
        .where(jobs.c.id == bindparam("job"), or_(*(jobs.c.state == state.value for state in QUEUED_JOB_STATES)))
        .values(
            pending_reason=bindparam("reason"),
            pending_message=bindparam("message"),
            pending_short=bindparam("short"),
            pending_position=bindparam("position"),
            pending_eta=bindparam("eta_at"),
        ),
        changes,
        execution_options={"synchronize_session": False},
    )


def holding_jobs_with_tasks(session: Session, only: Collection[int] | None = None) -> list[JobRow]:
    """Running and stopping jobs (of ``only``, when given), with their attempts and tasks
    loaded: what reconcile watches."""
    query = (
        select(JobRow)
        .where(JobRow.state.in_(HOLDING))
        .options(selectinload(JobRow.attempts).selectinload(AttemptRow.tasks))
    )
    if only is None:
        return list(session.scalars(query))
    return [job for chunk in chunks(sorted(only)) for job in session.scalars(query.where(JobRow.id.in_(chunk)))]


def running_attempts_with_limits(session: Session) -> list[tuple[JobRow, AttemptRow]]:
    """Running jobs with a ``maxRunTimeSeconds`` and their current attempt, while it runs."""
    query = (
        select(JobRow, AttemptRow)
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .where(
            JobRow.state == JobState.RUNNING,
            JobRow.max_runtime_seconds.is_not(None),
            AttemptRow.state == AttemptState.RUNNING,
        )
    )
    return [(job, attempt) for job, attempt in session.execute(query)]


WatchedTask = tuple[int, int, datetime | None, int, str, int, int, str]


def watched_attempt_tasks(session: Session) -> list[WatchedTask]:
    """One row per task of the running attempt of every running job that declares a
    ``watchdogSeconds``, by job: (job id, attempt number, attempt start, watchdog seconds,
    role, index, run, task state). Tasks in every state, so that an attempt whose only
    task is between two runs (``taskRetryCount``) is still seen: what the hang watchdog
    reads logs for."""
    query = (
        select(
            JobRow.id, AttemptRow.number, AttemptRow.started_at, JobRow.watchdog_seconds,
            TaskRow.role, TaskRow.index, TaskRow.run, TaskRow.state,
        )
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
        .where(
            JobRow.state == JobState.RUNNING,
            JobRow.watchdog_seconds.is_not(None),
            AttemptRow.state == AttemptState.RUNNING,
        )
        .order_by(JobRow.id, TaskRow.role, TaskRow.index)
    )
    return [cast(WatchedTask, tuple(row)) for row in session.execute(query)]


def holding_tasks(session: Session) -> list[tuple[Any, ...]]:
    """One row per unfinished task of a running or stopping job's current attempt, by job
    then task: (job id, VC, owner, priority, job state, grace seconds, max run time,
    attempt state, attempt start, attempt stop request, suspendable, GPU-seconds attained
    before this attempt, attempt number, whether the attempt runs borrowed, the most
    instances of its elastic role (None: fixed size), whether the task is leaving (an
    elastic job's shrink), role, index, node, GPU shares, CPU milli, memory MB)."""
    query = (
        select(
            JobRow.id, JobRow.vc, UserRow.name, JobRow.priority, JobRow.state, JobRow.grace_seconds,
            JobRow.max_runtime_seconds, AttemptRow.state, AttemptRow.started_at, AttemptRow.stop_requested_at,
            JobRow.suspendable, JobRow.attained_gpu_seconds, AttemptRow.number, AttemptRow.borrowed,
            JobRow.elastic_max, TaskRow.removed,
            TaskRow.role, TaskRow.index, TaskRow.node, TaskRow.gpus, TaskRow.cpu_milli, TaskRow.memory_mb,
        )
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
        .where(JobRow.state.in_(HOLDING), TaskRow.state.in_(UNFINISHED_TASKS))
        .order_by(JobRow.id, TaskRow.role, TaskRow.index)
    )
    return [tuple(row) for row in session.execute(query)]


def elastic_running(session: Session) -> bool:
    """Whether any elastic job runs (one the scheduler might grow)."""
    query = select(JobRow.id).where(JobRow.state == JobState.RUNNING, JobRow.elastic_max.is_not(None)).limit(1)
    return session.scalar(query) is not None


def elastic_workers(session: Session, job_ids: Sequence[int],
                    role: Mapping[int, str]) -> dict[int, tuple[int, bool]]:
    """For each job, of its ``role[job]``'s workers in its current attempt, any state: the
    highest instance index (an elastic job's next worker takes the one after: an attempt's
    (role, index) is unique, and a worker that left keeps its row), and whether one has
    ended on its own (not removed: the job is finishing, or losing workers)."""
    ended_alone = func.max(case((TaskRow.state.in_(FINISHED_TASKS) & TaskRow.removed.is_(False), 1), else_=0))
    found: dict[int, tuple[int, bool]] = {}
    for chunk in chunks(job_ids):
        query = (
            select(JobRow.id, TaskRow.role, func.max(TaskRow.index), ended_alone)
            .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
            .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
            .where(JobRow.id.in_(chunk))
            .group_by(JobRow.id, TaskRow.role)
        )
        for job_id, task_role, highest, ended in session.execute(query):
            if role.get(job_id) == task_role:
                found[job_id] = (highest, bool(ended))
    return found


def last_resized(session: Session, job_ids: Sequence[int]) -> dict[int, datetime]:
    """For each of ``job_ids`` ever resized (an elastic job), when it last was."""
    found: dict[int, datetime] = {}
    for chunk in chunks(job_ids):
        query = (select(JobEventRow.job_id, func.max(JobEventRow.at))
                 .where(JobEventRow.job_id.in_(chunk), JobEventRow.kind == EventKind.RESIZED)
                 .group_by(JobEventRow.job_id))
        found.update({job_id: at for job_id, at in session.execute(query)})
    return found


def jobs_ended_by(session: Session, job_ids: Sequence[int], cutoff: datetime) -> list[int]:
    """Which of ``job_ids`` have ended (a final state) at or before ``cutoff``."""
    ended: list[int] = []
    final = [state.value for state in FINAL_JOB_STATES]
    for chunk in chunks(job_ids):
        query = select(JobRow.id).where(
            JobRow.id.in_(chunk), JobRow.state.in_(final), JobRow.finished_at <= cutoff
        )
        ended.extend(session.scalars(query))
    return sorted(ended)


# -- monitoring's --------------------------------------------------------------------------


def job_counts_by_state(session: Session) -> dict[str, int]:
    """How many jobs are in each state (states with none are absent)."""
    query = select(JobRow.state, func.count()).group_by(JobRow.state)
    return {state: count for state, count in session.execute(query)}


def oldest_wait_by_vc(session: Session) -> dict[str, datetime]:
    """Per VC, since when its longest-waiting job has waited: its submission, or for a job
    requeued after an attempt (preempted, retried, lost), the end of its latest attempt."""
    # Correlated, so that only waiting jobs' attempts are read (by the job's index), not
    # every attempt the store holds.
    last_end = (
        select(func.max(AttemptRow.finished_at)).where(AttemptRow.job_id == JobRow.id).scalar_subquery()
    )
    query = (
        select(JobRow.vc, func.min(func.coalesce(last_end, JobRow.submitted_at)))
        .where(queued())
        .group_by(JobRow.vc)
    )
    return {vc: since for vc, since in session.execute(query) if since is not None}


def holding_job_attempt_spans(session: Session) -> list[tuple[int, str, str, datetime | None, datetime | None]]:
    """(job id, owner, VC, attempt start, attempt end) of every attempt of every running or
    stopping job, by job: what its run time is summed from."""
    query = (
        select(JobRow.id, UserRow.name, JobRow.vc, AttemptRow.started_at, AttemptRow.finished_at)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(AttemptRow, AttemptRow.job_id == JobRow.id)
        .where(JobRow.state.in_(HOLDING))
        .order_by(JobRow.id)
    )
    return [(job, user, vc, start, end) for job, user, vc, start, end in session.execute(query)]


def live_task_ports(session: Session) -> list[tuple[str, dict[str, list[int]] | None, int | None]]:
    """``(node, ports, master_port)`` of every waiting or running task: the ports its task
    and its attempt hold (``controller.world.held_ports``)."""
    rows = session.execute(select(TaskRow.node, TaskRow.ports, AttemptRow.master_port)
                           .join(AttemptRow, AttemptRow.id == TaskRow.attempt_id)
                           .where(TaskRow.state.in_([TaskState.WAITING, TaskState.RUNNING])))
    return [(node, ports, master) for node, ports, master in rows]


def live_tasks_with_jobs(session: Session, node: str | None = None) -> list[tuple[TaskRow, JobRow]]:
    """Every task placed or running (on ``node``, if given) with its job, in job, role, index order."""
    query = (select(TaskRow, JobRow).join(JobRow, JobRow.id == TaskRow.job_id)
             .where(TaskRow.state.in_([TaskState.WAITING, TaskState.RUNNING])))
    if node is not None:
        query = query.where(TaskRow.node == node)
    return [(task, job) for task, job in session.execute(query.order_by(TaskRow.job_id, TaskRow.role, TaskRow.index))]


# -- fair share's (controller/fairshare.py) ---------------------------------------------------

EndedRun = tuple[int, int, str, str, datetime, datetime, bool, list[list[int]], datetime | None, datetime | None,
                 bool]


def ended_attempt_runs(session: Session, since: datetime) -> Iterator[EndedRun]:
    """One row per task of every attempt that ended at or after ``since``: (job id, attempt
    number, VC, owner, attempt start, attempt end, borrowed, the task's GPU shares, the
    task's first start and its end, whether the job is elastic), by attempt. Read once,
    when the controller starts, to rebuild recent usage."""
    query = (
        select(
            AttemptRow.job_id, AttemptRow.number, JobRow.vc, UserRow.name, AttemptRow.started_at,
            AttemptRow.finished_at, AttemptRow.borrowed, TaskRow.gpus, TaskRow.started_at, TaskRow.finished_at,
            JobRow.elastic_max.is_not(None),
        )
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(TaskRow, TaskRow.attempt_id == AttemptRow.id)
        .where(AttemptRow.finished_at >= since, AttemptRow.started_at.is_not(None))
        .order_by(AttemptRow.job_id, AttemptRow.number)
    )
    for row in session.execute(query.execution_options(yield_per=1000)):
        yield cast(EndedRun, tuple(row))


def attempt_ends(session: Session, attempts: Sequence[tuple[int, int]]) -> dict[tuple[int, int], datetime]:
    """When each of these (job id, attempt number) ended, for those that have."""
    found: dict[tuple[int, int], datetime] = {}
    wanted = set(attempts)
    for chunk in chunks(sorted({job_id for job_id, _ in attempts})):
        query = select(AttemptRow.job_id, AttemptRow.number, AttemptRow.finished_at).where(
            AttemptRow.job_id.in_(chunk), AttemptRow.finished_at.is_not(None)
        )
        for job_id, number, finished in session.execute(query):
            if (job_id, number) in wanted and finished is not None:
                found[(job_id, number)] = finished
    return found
