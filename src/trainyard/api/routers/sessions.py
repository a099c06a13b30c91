"""Interactive JupyterLab sessions: the API (``/api/v1/sessions``: start, list, show, renew,
stop) and the way in (``/sessions/<id>/…``, HTTP and WebSocket), through the proxy of
``proxy.py``. The rules are ``services/dev_sessions.py``'s.

The way in checks the caller as the job-port proxy does (a token, or the portal's session
with a same-origin check for anything that changes something), lets in only the session's
owner (and admins with a token where the site allows it, ``session_admin_access``), and
adds JupyterLab's own token, which the user never needs to know: JupyterLab answers nobody
else, even on the node itself.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import Headers

from trainyard.api.bodies import MAX_ID, BodyRoute
from trainyard.api.deps import AppContext, context, current_user
from trainyard.api.openapi import errors
from trainyard.api.routers.jobs import JobId
from trainyard.api.routers.proxy import (
    Target,
    _credential,
    _due,
    _grants,
    _record,
    _refusal_to,
    forward_http,
    forward_websocket,
)
from trainyard.api.taskaccess import Caller, Refused, app_context, deny, identify_caller
from trainyard.backends.base import TaskKey
from trainyard.core.sessions import SESSION_PORT, SESSION_PREFIX, SESSION_ROLE, jupyter_token, session_path
from trainyard.core.states import FINAL_JOB_STATES, JobState
from trainyard.portal.auth import same_origin
from trainyard.schemas.sessions import RenewRequest, SessionRequest, SessionView
from trainyard.services import dev_sessions
from trainyard.services import jobs as job_service
from trainyard.services.taskports import owner_of
from trainyard.store.queries import dev_sessions as session_queries
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries.nodes import node_addresses
from trainyard.store.rows import UserRow

router = APIRouter(prefix="/sessions", tags=["sessions"], route_class=BodyRoute)
way_in = APIRouter()

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]

# A session's JupyterLab may take this long to answer after its task starts (a first
# start on a loaded node builds its workspace): until then a refused connection is "not
# yet" (503, the page reloads every STARTING_RETRY_SECONDS), after it the proxy's 502.
STARTING_SECONDS = 300.0
STARTING_RETRY_SECONDS = 2
QUEUED_RETRY_SECONDS = 5  # a session waiting in the queue: the page reloads this often


@router.post("", response_model=SessionView, status_code=201, responses=errors(401, 403, 404, 422))
def start_session(body: SessionRequest, user: User, ctx: Ctx) -> SessionView:
    """Start a JupyterLab session: a job of yours, scheduled like any (its VC, quota,
    priority: ``oppo`` runs on idle GPUs and is reclaimed first). Open ``url`` once it runs."""
    nodes = ctx.node_states()
    with ctx.db.session() as session:
        row = dev_sessions.start_session(session, user, body, policy=ctx.sessions, clock=ctx.clock, nodes=nodes)
        view = dev_sessions.view(row, ctx.clock.now())
    ctx.wake_controller()
    return view


@router.get("", response_model=list[SessionView], responses=errors(401, 422))
def list_sessions(
    user: User, ctx: Ctx,
    everyone: Annotated[bool, Query(alias="all", description="An admin: every user's sessions")] = False,
) -> list[SessionView]:
    """Your sessions, newest first, those that ended too."""
    with ctx.db.session() as session:
        now = ctx.clock.now()
        return [dev_sessions.view(row, now) for row in dev_sessions.list_sessions(session, user, everyone=everyone)]


@router.get("/{job_id}", response_model=SessionView, responses=errors(401, 404, 422))
def show_session(job_id: JobId, user: User, ctx: Ctx) -> SessionView:
    with ctx.db.session() as session:
        return dev_sessions.view(dev_sessions.session_of(session, user, job_id), ctx.clock.now())


@router.post("/{job_id}/renew", response_model=SessionView, responses=errors(401, 404, 409, 422))
def renew_session(job_id: JobId, user: User, ctx: Ctx, body: RenewRequest | None = None) -> SessionView:
    """Live ``hours`` more from now (default: the session's own lifetime), at most the site's
    longest lifetime at a time."""
    with ctx.db.session() as session:
        row = dev_sessions.renew_session(session, user, job_id, body.hours if body else None,
                                         policy=ctx.sessions, clock=ctx.clock)
        return dev_sessions.view(row, ctx.clock.now())


@router.delete("/{job_id}", response_model=SessionView, responses=errors(401, 404, 409, 422))
def stop_session(job_id: JobId, user: User, ctx: Ctx) -> SessionView:
    """Stop the session (its files stay in its job directory as long as the site keeps them)."""
    with ctx.db.session() as session:
        dev_sessions.session_of(session, user, job_id)
        job_service.request_stop(session, user, job_id, clock=ctx.clock)
    ctx.wake_controller()
    with ctx.db.session() as session:
        return dev_sessions.view(dev_sessions.session_of(session, user, job_id), ctx.clock.now())


# -- the way in ------------------------------------------------------------------------------


def _session_target(ctx: AppContext, caller: Caller, job_id: int) -> tuple[Target, str, float]:
    """Where session ``job_id``'s JupyterLab listens, its token and how many seconds of its
    start are left (``STARTING_SECONDS`` from its task's start), if ``caller`` may open it."""
    with ctx.db.session() as session:
        row = session_queries.dev_session(session, job_id)
        job = row.job if row is not None else None
        mine = job is not None and job.user_id == caller.user.id
        admitted = mine or (caller.user.is_admin and ctx.sessions.admin_access and not caller.by_cookie)
        if job is None or not admitted:
            raise Refused(404, f"no session {job_id}")
        if job.state != JobState.RUNNING:
            waiting = f" ({job.pending_short or job.state_message})" if job.state == JobState.WAITING else ""
            if job.state in FINAL_JOB_STATES or job.state == JobState.STOPPING:
                raise Refused(409, f"session {job_id} is {job.state}, not RUNNING: start a new one")
            if job.held_by:
                raise Refused(409, f"session {job_id} is {job.state}, held by {job.held_by}: "
                                   f"`yard resume {job_id}` lets it run again")
            raise Refused(503, f"session {job_id} is {job.state}{waiting}, not RUNNING: it opens once it runs",
                          retry_after=QUEUED_RETRY_SECONDS)
        task = job_queries.running_task(session, job_id, SESSION_ROLE, 0)
        ports = task.ports.get(SESSION_PORT) if task is not None else None
        token = jupyter_token(job.spec)
        if task is None or not ports or token is None:
            raise Refused(503, f"session {job_id} is starting: it opens in a moment",
                          retry_after=STARTING_RETRY_SECONDS)
        now = ctx.clock.now()
        left = STARTING_SECONDS - (now - (task.started_at or now)).total_seconds()
        key = TaskKey(job_id, task.attempt.number, task.role, task.index, task.run)
        owner = owner_of(ctx.backend, key, task.node)  # the token goes only to the task's own JupyterLab
        return Target(node_addresses(session).get(task.node) or task.node, ports[0], owner), token, left


async def _open(app_state: object, headers: Headers, cookies: dict[str, str], job_id: int, *, unsafe: bool,
                origin_ok: bool) -> tuple[Target, tuple[tuple[str, str], ...], bool]:
    """Where the session's JupyterLab is, the header that lets the request in and whether
    it is still starting (a refused connection then means "not yet"), if the caller may
    open it; a grant is kept a few seconds, as the job-port proxy keeps its own (a Lab page
    loads a hundred files at once)."""
    ctx = app_context(app_state)
    grants = _grants(app_state, ctx)
    tokens: dict[int, str] = getattr(app_state, "session_tokens", None) or {}
    app_state.session_tokens = tokens  # type: ignore[attr-defined]
    credential = _credential(headers, cookies)
    key = (credential or "", job_id, SESSION_ROLE, 0, 0)
    granted = grants.get(key) if credential is not None and job_id in tokens else None
    if granted is not None:
        caller, target = granted
    else:
        found = await run_in_threadpool(identify_caller, ctx, headers, cookies) if credential is not None else None
        if found is None:
            raise Refused(401, "sign in to the portal, or send 'Authorization: Bearer <token>'")
        caller = found
    if caller.by_cookie and unsafe and not origin_ok:
        raise Refused(403, "a request that changes something must come from this server's own pages")
    starting: dict[int, float] = getattr(app_state, "session_starting_until", None) or {}
    app_state.session_starting_until = starting  # type: ignore[attr-defined]
    if granted is None:
        target, tokens[job_id], left = await run_in_threadpool(_session_target, ctx, caller, job_id)
        starting[job_id] = ctx.clock.monotonic() + left
        grants.keep(key, caller, target)
    if _due(ctx, caller, job_id, SESSION_ROLE, 0, target.port, "the session"):
        await run_in_threadpool(_record, ctx, caller, job_id, SESSION_ROLE, 0, target.port, "the session")
    return target, (("Authorization", f"token {tokens[job_id]}"),), ctx.clock.monotonic() < starting.get(job_id, 0.0)


def _path(raw_path: bytes) -> str:
    """The path as sent: JupyterLab serves under ``/sessions/<id>/`` itself (its base URL)."""
    return raw_path.decode("latin-1") or "/"


@way_in.api_route(SESSION_PREFIX + "/{job_id}", include_in_schema=False, methods=["GET", "HEAD"])
async def session_root(job_id: JobId) -> Response:
    return RedirectResponse(session_path(job_id), status_code=307)


@way_in.api_route(SESSION_PREFIX + "/{job_id}/{path:path}", include_in_schema=False,
                  methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def session_http(job_id: JobId, path: str, request: Request) -> Response:
    try:
        target, token, starting = await _open(request.app.state, request.headers, dict(request.cookies), job_id,
                                              unsafe=request.method not in ("GET", "HEAD", "OPTIONS"),
                                              origin_ok=same_origin(request))
    except Refused as exc:
        return _refusal_to(request, exc)
    return await forward_http(request, target, _path(request.scope.get("raw_path") or b""),
                              session_path(job_id).rstrip("/"), f"session {job_id}", token,
                              starting=f"session {job_id} runs, and its JupyterLab is starting: it opens in a moment"
                              if starting else None, starting_retry=STARTING_RETRY_SECONDS)


@way_in.websocket(SESSION_PREFIX + "/{job_id}/{path:path}")
async def session_websocket(websocket: WebSocket, job_id: int, path: str) -> None:
    try:
        if not 1 <= job_id <= MAX_ID:
            raise Refused(404, "there is no such page")
        # Browsers send cookies with a WebSocket handshake from any site: it must come from ours.
        target, token, _ = await _open(websocket.app.state, websocket.headers, dict(websocket.cookies), job_id,
                                       unsafe=True, origin_ok=same_origin(websocket))  # type: ignore[arg-type]
    except Refused as exc:
        await deny(websocket, exc)
        return
    await forward_websocket(websocket, target, _path(websocket.scope.get("raw_path") or b""),
                            session_path(job_id).rstrip("/"), f"session {job_id}", token)
