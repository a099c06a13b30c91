"""What a user does to a job once it exists — stop it (one, many, or an alert's), suspend
and resume it, start, renew and stop a JupyterLab session — each composed once for the API
and the portal: its own unit of work (through the services that own the rules), then the
controller woken, since it is the controller that acts on the change (a renewal needs no
wake: the controller reads the new expiry on its next cull check). Also jobs and sessions
as both doors list and show them, each read in a unit of its own."""

from __future__ import annotations

from datetime import datetime

from trainyard.backends.base import gpu_share_note
from trainyard.schemas.history import JobMetrics
from trainyard.schemas.jobs import JobDetail, JobPage
from trainyard.schemas.sessions import SessionRequest, SessionView
from trainyard.services import alerts as alert_service
from trainyard.services import dev_sessions, history, suspension
from trainyard.services import jobs as job_service
from trainyard.services.server import Server
from trainyard.services.views import job_summary
from trainyard.spec.models import JobSpec
from trainyard.store.queries import jobs as job_queries
from trainyard.store.rows import UserRow


def job_page(server: Server, viewer: UserRow, *, state: str | None = None, user: str | None = None,
             vc: str | None = None, text: str | None = None, order: str = "newest", limit: int = 50,
             before: int | None = None, after: int | None = None, now: datetime | None = None) -> JobPage:
    """One page of the jobs ``viewer`` may see (``jobs.list_jobs``) and the cursor to the next;
    their ages as of ``now`` (default: the clock's)."""
    with server.db.session() as session:
        rows, next_cursor = job_service.list_jobs(session, viewer, state=state, user=user, vc=vc, text=text,
                                                  order=order, limit=limit, before=before, after=after)
        now = server.clock.now() if now is None else now
        return JobPage(items=[job_summary(r, now) for r in rows], next=next_cursor)


def job_counts(server: Server) -> dict[str, int]:
    """How many jobs are in each state (an admin's overview)."""
    with server.db.session() as session:
        return job_queries.job_counts_by_state(session)


def job_detail(server: Server, viewer: UserRow, job_id: int) -> JobDetail:
    """The job in full as ``viewer`` may see it, less its directory's disk use (measured
    outside any transaction by who answers)."""
    with server.db.session() as session:
        return job_service.describe_job(session, viewer, job_id, specs=server.specs, backend=server.backend.name,
                                        now=server.clock.now(), gpu_share_note=gpu_share_note(server.backend))


def job_spec(server: Server, viewer: UserRow, job_id: int) -> JobSpec:
    """The job file of a job ``viewer`` may see, parsed (through the shared cache)."""
    with server.db.session() as session:
        return server.specs.of(job_service.get_job(session, viewer, job_id))


def job_metrics(server: Server, viewer: UserRow, job_id: int, *, since: str | None, until: str | None,
                task: str | None) -> JobMetrics:
    """A job's figures per task over ``since``..``until`` (``history.window``), its owner's or
    an admin's to see."""
    now = server.clock.now()
    span = history.window(since, until, now)
    with server.db.session() as session:
        return history.job_metrics(session, viewer, job_id, span, task=task, specs=server.specs,
                                   retention=server.monitor_retention, now=now)


def is_session(server: Server, job_id: int) -> bool:
    """Whether job ``job_id`` is a JupyterLab session's."""
    with server.db.session() as session:
        return dev_sessions.is_session(session, job_id)


def stop(server: Server, user: UserRow, job_id: int, *, because: str = "") -> None:
    """Stop job ``job_id`` (a running one: the controller signals its tasks)."""
    job_service.stop_job(server.db, user, job_id, clock=server.clock, because=because)
    server.wake_controller()


def stop_many(server: Server, user: UserRow, job_ids: list[int]) -> job_service.StopOutcome:
    """Stop each job as ``stop`` would; one that cannot be stopped keeps none of the others running."""
    outcome = job_service.stop_jobs(server.db, user, job_ids, clock=server.clock)
    if outcome.stopped:
        server.wake_controller()
    return outcome


def stop_flagged(server: Server, user: UserRow, alert_id: int) -> int:
    """An admin stops the job an alert is about; its id."""
    with server.db.session() as session:
        job_id = alert_service.stop_flagged_job(session, user, alert_id, server.clock).id
    server.wake_controller()
    return job_id


def suspend(server: Server, user: UserRow, job_id: int) -> None:
    """Suspend the job and hold it until it is resumed (``services/suspension.py``)."""
    suspension.suspend_job(server.db, user, job_id, specs=server.specs, clock=server.clock)
    server.wake_controller()


def resume(server: Server, user: UserRow, job_id: int) -> None:
    """Release a job held by ``suspend``: it waits for room again as a new attempt."""
    suspension.resume_job(server.db, user, job_id, clock=server.clock)
    server.wake_controller()


def start_session(server: Server, user: UserRow, wanted: SessionRequest) -> SessionView:
    """Start a JupyterLab session: a job of ``user``'s, scheduled like any."""
    nodes = server.node_states()
    with server.db.session() as session:
        row = dev_sessions.start_session(session, user, wanted, policy=server.sessions, clock=server.clock,
                                         nodes=nodes)
        view = dev_sessions.view(row, server.clock.now())
    server.wake_controller()
    return view


def sessions(server: Server, user: UserRow, *, everyone: bool = False,
             now: datetime | None = None) -> list[SessionView]:
    """``user``'s sessions, newest first, those that ended too (an admin's ``everyone``: all);
    their idleness as of ``now`` (default: the clock's)."""
    with server.db.session() as session:
        now = server.clock.now() if now is None else now
        return [dev_sessions.view(row, now) for row in dev_sessions.list_sessions(session, user, everyone=everyone)]


def session_view(server: Server, user: UserRow, job_id: int) -> SessionView:
    with server.db.session() as session:
        return dev_sessions.view(dev_sessions.session_of(session, user, job_id), server.clock.now())


def renew_session(server: Server, user: UserRow, job_id: int, hours: float | None) -> SessionView:
    """Let session ``job_id`` live ``hours`` more from now (None: its own lifetime), within
    the site's rules (``dev_sessions.renew_session``)."""
    with server.db.session() as session:
        row = dev_sessions.renew_session(session, user, job_id, hours, policy=server.sessions, clock=server.clock)
        return dev_sessions.view(row, server.clock.now())


def stop_session(server: Server, user: UserRow, job_id: int) -> SessionView:
    """Stop session ``job_id`` (its files stay in its job directory as long as the site keeps them)."""
    with server.db.session() as session:
        dev_sessions.session_of(session, user, job_id)
        job_service.request_stop(session, user, job_id, clock=server.clock)
    server.wake_controller()
    return session_view(server, user, job_id)
