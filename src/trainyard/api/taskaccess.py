"""Who may reach into a running task, and which task it is: the one rule that the port
proxy, the TCP tunnel (``routers/proxy``) and exec (``routers/taskexec``) share.

A caller is identified by a token (``Authorization: Bearer``) or by the portal's session
cookie. Only the job's owner and admins with a token get through; anyone else is told 404,
as for a job that does not exist. An admin's browser session is refused (403): the task's
pages, or its terminal, would run with the admin's rights (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

from trainyard.api.deps import AppContext
from trainyard.backends.base import TaskKey
from trainyard.core.states import JobState
from trainyard.portal.auth import COOKIE
from trainyard.services import web_sessions
from trainyard.services.auth import hash_token
from trainyard.store.queries import jobs as job_queries
from trainyard.store.rows import UserRow


class Refused(Exception):
    """The request is refused with ``status``; ``message`` says why, for the caller;
    ``retry_after`` (seconds), when what was asked for is on its way (a task starting): a
    program gets it as ``Retry-After``, a browser a page that reloads itself after it."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Caller:
    user: UserRow
    by_cookie: bool  # a browser's session, rather than a token
    credential: str = ""  # what it came with, as `credential_key` names it (api/revocation.py)


@dataclass(frozen=True)
class RunningTask:
    """A running task of a job the caller may reach into."""

    key: TaskKey
    node: str
    ports: dict[str, list[int]]


def app_context(app_state: object) -> AppContext:
    ctx: AppContext = app_state.ctx  # type: ignore[attr-defined]
    return ctx


def credential_key(headers: Headers, cookies: dict[str, str]) -> str | None:
    """What ``identify_caller`` authenticates a request by (a bearer token first, else the
    portal's cookie), as a key that names it without holding it: ``token:<SHA-256>`` or
    ``cookie:<SHA-256>``; None when the request carries neither."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return "token:" + hash_token(auth[7:].strip())
    cookie = cookies.get(COOKIE, "")
    return "cookie:" + hash_token(cookie) if cookie else None


def identify_caller(ctx: AppContext, headers: Headers, cookies: dict[str, str]) -> Caller | None:
    """The user behind a request's token or portal session; None when neither is valid."""
    credential = credential_key(headers, cookies)
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        user = ctx.tokens.user_for_token(auth[7:].strip())
        return Caller(user, False, credential or "") if user is not None and not user.disabled else None
    cookie = cookies.get(COOKIE, "")
    if not cookie:
        return None
    with ctx.db.session() as session:
        row = web_sessions.session_for_cookie(session, cookie, clock=ctx.clock)
        if row is None or row.user.disabled:
            return None
        return Caller(row.user, True, credential or "")


def running_task(ctx: AppContext, caller: Caller, job_id: int, role: str, index: int, *,
                 what: str, instead: str) -> RunningTask:
    """Task ``role/index`` of job ``job_id`` if it runs and ``caller`` may reach into it;
    Refused saying why not. ``what`` names what is reached ("its ports"), ``instead`` the
    command an admin uses rather than the browser."""
    with ctx.db.session() as session:
        job = job_queries.job_by_id(session, job_id)
        if job is None or (not caller.user.is_admin and job.user_id != caller.user.id):
            raise Refused(404, f"no job {job_id}")
        if caller.by_cookie and job.user_id != caller.user.id:
            # An admin's browser would run the job's pages with the admin's session.
            raise Refused(403, f"job {job_id} is another user's: reach {what} with `{instead}`, "
                               "not through the browser")
        if job.state != JobState.RUNNING:
            raise Refused(409, f"job {job_id} is {job.state}, not RUNNING: {what} are reachable only while it runs")
        task = job_queries.running_task(session, job_id, role, index)
        if task is None:
            raise Refused(404, f"job {job_id} has no running task {role}/{index}")
        key = TaskKey(job_id, task.attempt.number, task.role, task.index, task.run)
        return RunningTask(key, task.node, {name: list(ports) for name, ports in task.ports.items()})


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
