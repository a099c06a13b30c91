"""What a user does to a job once it exists — stop it (one, many, or an alert's), suspend
and resume it, start and stop a JupyterLab session — each composed once for the API and
the portal: its own unit of work (through the services that own the rules), then the
controller woken, since it is the controller that acts on the change."""

from __future__ import annotations

from trainyard.schemas.sessions import SessionRequest, SessionView
from trainyard.services import alerts as alert_service
from trainyard.services import dev_sessions, suspension
from trainyard.services import jobs as job_service
from trainyard.services.server import Server
from trainyard.store.rows import UserRow


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


def stop_session(server: Server, user: UserRow, job_id: int) -> SessionView:
    """Stop session ``job_id`` (its files stay in its job directory as long as the site keeps them)."""
    with server.db.session() as session:
        dev_sessions.session_of(session, user, job_id)
        job_service.request_stop(session, user, job_id, clock=server.clock)
    server.wake_controller()
    with server.db.session() as session:
        return dev_sessions.view(dev_sessions.session_of(session, user, job_id), server.clock.now())
