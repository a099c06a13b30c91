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

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.api.routers.jobs import JobId
from trainyard.api.routers.proxy import _refusal_to, forward_http, forward_websocket
from trainyard.api.taskaccess import admit, deny, note_use
from trainyard.core.sessions import SESSION_PREFIX, SESSION_ROLE, session_path
from trainyard.schemas.sessions import RenewRequest, SessionRequest, SessionView
from trainyard.services import job_actions, task_access
from trainyard.services.task_access import STARTING_RETRY_SECONDS, Refused, Target
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, BodyRoute
from trainyard.web.callers import same_origin
from trainyard.web.context import AppContext, context, context_of

router = APIRouter(prefix="/sessions", tags=["sessions"], route_class=BodyRoute)
way_in = APIRouter()

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]



@router.post("", response_model=SessionView, status_code=201, responses=errors(401, 403, 404, 422))
def start_session(body: SessionRequest, user: User, ctx: Ctx) -> SessionView:
    """Start a JupyterLab session: a job of yours, scheduled like any (its VC, quota,
    priority: ``oppo`` runs on idle GPUs and is reclaimed first). Open ``url`` once it runs."""
    return job_actions.start_session(ctx, user, body)


@router.get("", response_model=list[SessionView], responses=errors(401, 422))
def list_sessions(
    user: User, ctx: Ctx,
    everyone: Annotated[bool, Query(alias="all", description="An admin: every user's sessions")] = False,
) -> list[SessionView]:
    """Your sessions, newest first, those that ended too."""
    return job_actions.sessions(ctx, user, everyone=everyone)


@router.get("/{job_id}", response_model=SessionView, responses=errors(401, 404, 422))
def show_session(job_id: JobId, user: User, ctx: Ctx) -> SessionView:
    return job_actions.session_view(ctx, user, job_id)


@router.post("/{job_id}/renew", response_model=SessionView, responses=errors(401, 404, 409, 422))
def renew_session(job_id: JobId, user: User, ctx: Ctx, body: RenewRequest | None = None) -> SessionView:
    """Live ``hours`` more from now (default: the session's own lifetime), at most the site's
    longest lifetime at a time."""
    return job_actions.renew_session(ctx, user, job_id, body.hours if body else None)


@router.delete("/{job_id}", response_model=SessionView, responses=errors(401, 404, 409, 422))
def stop_session(job_id: JobId, user: User, ctx: Ctx) -> SessionView:
    """Stop the session (its files stay in its job directory as long as the site keeps them)."""
    return job_actions.stop_session(ctx, user, job_id)


# -- the way in ------------------------------------------------------------------------------


async def _open(ctx: AppContext, headers: Headers, cookies: dict[str, str], job_id: int, *, unsafe: bool,
                origin_ok: bool) -> tuple[Target, tuple[tuple[str, str], ...], bool]:
    """Where the session's JupyterLab is, the header that lets the request in and whether
    it is still starting (a refused connection then means "not yet"), if the caller may
    open it (``services/task_access``); a grant is kept a few seconds, as the job-port
    proxy keeps its own (a Lab page loads a hundred files at once)."""
    tokens, starting = ctx.session_tokens, ctx.session_starting_until
    admitted = await admit(ctx, headers, cookies, job_id, SESSION_ROLE, 0, 0, unsafe=unsafe, origin_ok=origin_ok,
                           reuse=job_id in tokens)
    caller, kept = admitted.caller, admitted.target
    if kept is not None:
        target = kept
    else:
        target, tokens[job_id], left = await run_in_threadpool(
            task_access.session_target, ctx.db, ctx.backend, ctx.clock, caller, job_id,
            admin_access=ctx.sessions.admin_access)
        starting[job_id] = ctx.clock.monotonic() + left
        ctx.grants.keep(admitted.key, caller, target)
    await note_use(ctx, caller, job_id, SESSION_ROLE, 0, target.port, "the session")
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
        target, token, starting = await _open(context_of(request), request.headers, dict(request.cookies), job_id,
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
        target, token, _ = await _open(context_of(websocket), websocket.headers, dict(websocket.cookies), job_id,
                                       unsafe=True, origin_ok=same_origin(websocket))
    except Refused as exc:
        await deny(websocket, exc)
        return
    await forward_websocket(websocket, target, _path(websocket.scope.get("raw_path") or b""),
                            session_path(job_id).rstrip("/"), f"session {job_id}", token)
