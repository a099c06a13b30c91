"""Interactive JupyterLab sessions (``yard dev``, the portal's "New JupyterLab"; HAI's Studio).

A session is a job, scheduled like any other (its VC, quota, priority, a fraction of a GPU),
of one task that runs the real ``jupyterlab`` with the user's environment or image and
storages. JupyterLab listens on the task's allocated port with a token only Trainyard knows
(a secret of the job, given to the task as ``JUPYTER_TOKEN``), so nobody reaches it but
through ``yard up``'s proxy at ``/sessions/<id>/``, which checks who is asking and adds the
token (``api/routers/sessions.py``). The session lives ``hours`` from its start, then is
stopped unless renewed; the controller reads how idle it is (``controller/sessions.py``).
"""

from __future__ import annotations

import secrets
import shlex
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.sessions import (
    SESSION_PORT,
    SESSION_PREFIX,
    SESSION_ROLE,
    TOKEN_SECRET,
    SessionPolicy,
    session_path,
)
from trainyard.core.states import FINAL_JOB_STATES
from trainyard.schemas.sessions import SessionRequest, SessionView
from trainyard.services.errors import Conflict, Invalid, NotFound
from trainyard.services.jobs import get_job, submit_job
from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import validate_job
from trainyard.store.events import record_event
from trainyard.store.queries import dev_sessions as session_queries
from trainyard.store.rows import DevSessionRow, UserRow

DEFAULT_NAME = "jupyterlab"
ROLE_PATH = f"taskRoles.{SESSION_ROLE}"
# Where a problem in the job made from a request is reported: the request's own field.
REQUEST_FIELDS = {
    f"{ROLE_PATH}.resourcePerInstance.gpu": "gpu",
    f"{ROLE_PATH}.resourcePerInstance.cpu": "cpu",
    f"{ROLE_PATH}.resourcePerInstance.memoryMB": "memoryMB",
    "name": "name",
    "image": "image",
    "environment": "environment",
    "defaults.virtualCluster": "virtualCluster",
    "priority": "priority",
}


def lab_command(python: str) -> str:
    """The task's command: JupyterLab on the task's port, at its path on ``yard up``'s
    address, its files in the job's directory (kept across the session's attempts: an
    ``oppo`` session reclaimed and started again finds its notebooks). ``allow_root``: where
    tasks run as root (a root ``yard up`` with ``task_accounts: server``), the site chose so.
    No update checks or news: cluster nodes are often offline, and the site updates JupyterLab."""
    return (
        f"exec {shlex.quote(python)} -m jupyterlab --no-browser --ServerApp.ip=0.0.0.0"
        f" --ServerApp.port=$PAI_PORT_LIST_{SESSION_ROLE}_0_{SESSION_PORT} --ServerApp.port_retries=0"
        f" --ServerApp.base_url={SESSION_PREFIX}/$TRAINYARD_JOB_ID/ --ServerApp.allow_remote_access=True"
        " --ServerApp.trust_xheaders=True --ServerApp.allow_root=True"
        " --ServerApp.root_dir=\"${TRAINYARD_JOB_DIR:-$PWD}\""
        " --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate --LabApp.news_url=None"
    )


def session_document(request: SessionRequest, policy: SessionPolicy, token: str) -> dict[str, Any]:
    """The job file a session runs as."""
    python = "python3" if request.image or request.environment else policy.python
    if python is None:
        raise SpecError.single(
            "environment",
            "this site has no Python with JupyterLab for sessions: name an environment or an image that has "
            "JupyterLab (`--environment E` / `--image I`), or ask the admin to set TRAINYARD_SESSION_PYTHON",
        )
    resources: dict[str, Any] = {"gpu": request.gpu, "ports": {SESSION_PORT: 1}}
    if request.cpu is not None:
        resources["cpu"] = request.cpu
    if request.memoryMB is not None:
        resources["memoryMB"] = request.memoryMB
    document: dict[str, Any] = {
        "protocolVersion": 2,
        "name": request.name or DEFAULT_NAME,
        "secrets": {TOKEN_SECRET: token},
        "stopGracePeriodSeconds": 10,
        "storages": [{"name": name} for name in request.storages],
        "taskRoles": {SESSION_ROLE: {
            "instances": 1,
            "resourcePerInstance": resources,
            # The token reaches JupyterLab in its environment, never on a command line.
            "commands": [f"export JUPYTER_TOKEN=<% $secrets.{TOKEN_SECRET} %>", lab_command(python)],
        }},
    }
    if request.image:
        document["image"] = request.image
    if request.environment:
        document["environment"] = request.environment
    if request.virtualCluster:
        document["defaults"] = {"virtualCluster": request.virtualCluster}
    if request.priority is not None:
        document["priority"] = request.priority
    return document


def _as_request_error(error: SpecError) -> Invalid:
    """The problems of the job made from a request, each at the request's own field."""
    def field(path: str) -> str:
        for prefix, name in REQUEST_FIELDS.items():
            if path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "["):
                return name + path[len(prefix):]
        return "storages" if path.startswith("storages") else path
    errors = [FieldError(field(e.path), e.message) for e in error.errors]
    return Invalid("invalid session request: " + "; ".join(map(str, errors)),
                   details=[{"path": e.path, "message": e.message} for e in errors])


def _hours(hours: float | None, default: float, policy: SessionPolicy) -> float:
    hours = default if hours is None else hours
    if hours > policy.max_hours:
        raise Invalid(f"hours: at most {policy.max_hours:g} h at a time on this site (got {hours:g}); "
                      "renew the session before it ends to keep it longer")
    return hours


def start_session(session: Session, user: UserRow, request: SessionRequest, *, policy: SessionPolicy,
                  clock: Clock, nodes: Any = None) -> DevSessionRow:
    """Queue a session's job, checked as any submit is (VC, quota, storages, environment)."""
    hours = _hours(request.hours, policy.hours, policy)
    try:
        spec = validate_job(session_document(request, policy, secrets.token_hex(24)))
    except SpecError as error:
        raise _as_request_error(error) from None
    job = submit_job(session, user, spec, clock=clock, nodes=nodes)
    row = DevSessionRow(job_id=job.id, hours=hours, renewals=0, check_error="")
    session.add(row)
    session.flush()
    return row


def session_of(session: Session, viewer: UserRow, job_id: int) -> DevSessionRow:
    """The session ``job_id`` if ``viewer`` may see it (its owner, an admin); else NotFound."""
    get_job(session, viewer, job_id)  # the job's own visibility check (NotFound otherwise)
    row = session_queries.dev_session(session, job_id)
    if row is None:
        raise NotFound(f"job {job_id} is not a session (`yard dev list` lists yours)")
    return row


def is_session(session: Session, job_id: int) -> bool:
    """Whether job ``job_id`` is a session (whoever may see it)."""
    return session_queries.dev_session(session, job_id) is not None


def list_sessions(session: Session, viewer: UserRow, *, everyone: bool = False) -> list[DevSessionRow]:
    """The viewer's sessions, newest first (an admin's ``everyone``: all users')."""
    return session_queries.dev_sessions(session, None if everyone and viewer.is_admin else viewer.id)


def renew_session(session: Session, viewer: UserRow, job_id: int, hours: float | None, *,
                  policy: SessionPolicy, clock: Clock) -> DevSessionRow:
    """Live ``hours`` more from now (default: the session's own lifetime); one that has not
    started yet gets that lifetime from its start."""
    row = session_of(session, viewer, job_id)
    job = row.job
    if job.state in FINAL_JOB_STATES:
        raise Conflict(f"session {job_id} has already ended ({job.state}): start a new one with `yard dev`")
    hours = _hours(hours, row.hours, policy)
    now = clock.now()
    row.renewals += 1
    if row.expires_at is None:
        row.hours = hours
        message = f"renewed by {viewer.name}: it will live {hours:g} h from its start"
    else:
        row.expires_at = now + timedelta(hours=hours)
        message = f"renewed by {viewer.name}: it ends at {row.expires_at:%Y-%m-%d %H:%M:%S} UTC ({hours:g} h from now)"
    record_event(session, job_id, transitions.Event(transitions.EventKind.SESSION_RENEWED, message, now))
    return row


def view(row: DevSessionRow, now: datetime) -> SessionView:
    job = row.job
    spec_roles = job.spec.get("taskRoles", {}) if isinstance(job.spec, dict) else {}
    gpu = (spec_roles.get(SESSION_ROLE, {}).get("resourcePerInstance", {}) or {}).get("gpu", 0)
    idle = (now - row.last_activity).total_seconds() if row.last_activity is not None else None
    return SessionView(
        id=job.id, name=job.name, user=job.user.name, state=job.state, stateMessage=job.state_message,
        url=session_path(job.id), gpu=float(gpu or 0), hours=row.hours, expiresAt=row.expires_at,
        renewals=row.renewals, lastActivity=row.last_activity, idleSeconds=idle, kernels=row.kernels,
        connections=row.connections, checkError=row.check_error,
    )
