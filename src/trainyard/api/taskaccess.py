"""The HTTP side of reaching into a task (the port proxy, the tunnel, exec, the sessions'
way in): who the caller is (``web/callers``), with the grants ``services/task_access``
keeps, and how its refusal reaches the caller — an HTTP answer in Trainyard's error
format, or a WebSocket handshake's. Who may reach what is ``services/task_access``'s."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

from trainyard.services.task_access import Caller, GrantKey, Refused, Target, record_port_use
from trainyard.web.callers import credential_key, identify_caller
from trainyard.web.context import AppContext


@dataclass(frozen=True)
class Admitted:
    key: GrantKey  # the grant's key, to ``keep`` a new target under
    caller: Caller
    target: Target | None  # what a kept grant let the caller reach; None: not asked yet


def refusal(exc: Refused) -> JSONResponse:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return JSONResponse({"detail": exc.message, "errors": []}, status_code=exc.status, headers=headers)


async def deny(websocket: WebSocket, exc: Refused) -> None:
    """Answer the handshake with the refusal's status and message where the server can send
    one (uvicorn can), else close it (the browser then sees 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(refusal(exc))
    else:
        await websocket.close(code=1008, reason=exc.message[:120])


async def admit(ctx: AppContext, headers: Headers, cookies: dict[str, str], job_id: int, role: str, index: int,
                port: int, *, unsafe: bool, origin_ok: bool, reuse: bool = True) -> Admitted:
    """The caller of a request into a task, and the target a grant kept a moment ago let it
    reach (None: ask ``services/task_access`` again, then ``keep`` it); Refused 401 without a
    valid credential, 403 for a browser's state-changing request from another site.
    ``reuse``: whether a kept grant may stand (a session's also needs its JupyterLab token)."""
    credential = credential_key(headers, cookies)
    key = (credential or "", job_id, role, index, port)
    granted = ctx.grants.get(key) if credential is not None and reuse else None
    if granted is not None:
        caller, target = granted
    else:
        found = await run_in_threadpool(identify_caller, ctx, headers, cookies) if credential is not None else None
        if found is None:
            raise Refused(401, "sign in to the portal, or send 'Authorization: Bearer <token>'")
        caller, target = found, None
    if caller.by_cookie and unsafe and not origin_ok:
        raise Refused(403, "a request that changes something must come from this server's own pages")
    return Admitted(key, caller, target)


async def note_use(ctx: AppContext, caller: Caller, job_id: int, role: str, index: int, port: int, how: str) -> None:
    """An event on the job when a user starts using a port, at most once per EVENT_EVERY_SECONDS."""
    if ctx.port_uses.due(caller, job_id, role, index, port, how):  # most requests need no thread for it
        await run_in_threadpool(record_port_use, ctx.db, ctx.clock, caller, job_id, role, index, port, how)
